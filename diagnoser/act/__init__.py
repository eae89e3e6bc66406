"""Act: the restart controller behind `diagnoser run` (see DESIGN.md, "act").

controller (the loop) -> supervise (watch an attempt) -> triage -> policy (pure decision)
-> executors (local/torchrun; Slurm, Kubernetes later); checkpoints (newest valid), events (audit/v1),
runstate (run directory, lock, state from the audit log), approval, summary, cli.
"""
