"""Chat-ops (Slack): `/diagnose`, one thread per job, Approve / Deny buttons, verdict feedback.

Modules: `config` (BotConfig: env / config file, never the command line), `security` (Slack request
signatures, per-channel rate limit), `poster` (every outgoing message is redacted and rate-limited),
`blocks` (Block Kit), `notifier` (SlackNotifier, WebhookNotifier for `diagnoser run`),
`approver` (SlackApprover, an `act.approval.Approver`), `feedback` (verdict cache, incident memory),
`app` (the slack-bolt App and its handlers), `server` (a loopback-by-default WSGI server), `cli`.
"""
