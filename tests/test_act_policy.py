"""The restart policy, table-driven: every rule, its order, budgets over time, modes, purity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnoser.act.policy import (
    Backoff,
    Decision,
    JobHistory,
    Mode,
    PastFailure,
    Policy,
    backoff_delay,
    decide,
    jitter_unit,
)
from diagnoser.models import Action, Category, Culprit, Diagnosis

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
H, N, U, K = Category.HARDWARE, Category.INFRA, Category.USER_CODE, Category.UNKNOWN  # N: network/infra
A = Action


def verdict(cat: Category = N, subtype: str = "net", action: Action = A.RESTART, conf: float = 0.9,
            nodes: tuple[str, ...] = (), ranks: tuple[int, ...] = ()) -> Diagnosis:
    return Diagnosis(category=cat, subtype=subtype, action=action, confidence=conf,
                     culprit=Culprit(nodes=list(nodes), ranks=list(ranks)), root_cause="test")


def past(minutes_ago: float, cat: Category = N, subtype: str = "net", action: Action | None = A.RESTART,
         nodes: tuple[str, ...] = (), ranks: tuple[int, ...] = ()) -> PastFailure:
    return PastFailure(NOW - timedelta(minutes=minutes_ago), cat, subtype, nodes, ranks, action)


def hist(*failures: PastFailure, excluded: tuple[tuple[float, str], ...] = ()) -> JobHistory:
    return JobHistory("job-7", tuple(failures),
                      tuple((NOW - timedelta(minutes=m), n) for m, n in excluded))


# (id, history, verdict, policy overrides, expected action, expected rule)
CASES = [
    # the verdict's action passes when nothing objects
    ("restart", hist(), verdict(), {}, A.RESTART, "verdict"),
    ("exclude with node", hist(), verdict(H, "xid79", A.RESTART_EXCLUDING_NODES, nodes=("n1",)), {},
     A.RESTART_EXCLUDING_NODES, "verdict"),
    ("drain without an approver excludes", hist(), verdict(H, "xid79", A.DRAIN_AND_RESTART, nodes=("n1",)), {},
     A.RESTART_EXCLUDING_NODES, "verdict"),
    ("drain when not gated", hist(), verdict(H, "xid79", A.DRAIN_AND_RESTART, nodes=("n1",)),
     {"require_approval": frozenset()}, A.DRAIN_AND_RESTART, "verdict"),
    ("drain and exclude gated: plain restart", hist(), verdict(H, "xid79", A.DRAIN_AND_RESTART, nodes=("n1",)),
     {"require_approval": frozenset({A.DRAIN_AND_RESTART, A.RESTART_EXCLUDING_NODES})}, A.RESTART, "verdict"),
    ("gated rollback is held", hist(), verdict(U, "checkpoint_corrupt", A.ROLLBACK_AND_RESTART, 0.8),
     {"require_approval": frozenset({A.ROLLBACK_AND_RESTART})}, A.ESCALATE, "verdict"),
    ("backoff", hist(), verdict(N, "stale", A.RETRY_AFTER_BACKOFF), {}, A.RETRY_AFTER_BACKOFF, "verdict"),
    ("rollback for user code", hist(), verdict(U, "checkpoint_corrupt", A.ROLLBACK_AND_RESTART, 0.8), {},
     A.ROLLBACK_AND_RESTART, "verdict"),
    # a NaN/Inf loss stops for a human unless the operator opted in to one rollback per divergence
    ("divergence stops", hist(), verdict(U, "nan_loss", A.STOP_AND_NOTIFY, 0.8), {}, A.STOP_AND_NOTIFY, "user_code"),
    ("a proposed rollback of a divergence stops without the opt-in", hist(),
     verdict(U, "nan_loss", A.ROLLBACK_AND_RESTART, 0.8), {}, A.STOP_AND_NOTIFY, "user_code"),
    ("opted in: the first divergence rolls back", hist(), verdict(U, "nan_loss", A.STOP_AND_NOTIFY, 0.8),
     {"rollback_on_divergence": True}, A.ROLLBACK_AND_RESTART, "rollback_on_divergence"),
    ("opted in: diverging again after a rollback stops",
     hist(past(30, U, "nan_loss", A.ROLLBACK_AND_RESTART), past(10, N, "net")),
     verdict(U, "nan_loss", A.STOP_AND_NOTIFY, 0.8), {"rollback_on_divergence": True}, A.STOP_AND_NOTIFY, "user_code"),
    ("opted in: other user code still stops", hist(), verdict(U, "key_error", A.STOP_AND_NOTIFY, 0.9),
     {"rollback_on_divergence": True}, A.STOP_AND_NOTIFY, "user_code"),
    ("opted in: a weak divergence verdict is a plain restart", hist(), verdict(U, "nan_loss", A.STOP_AND_NOTIFY, 0.4),
     {"rollback_on_divergence": True}, A.RESTART, "low_confidence"),
    ("opted-in rollback spends the user-code budget",
     hist(past(3, U, "a", A.ROLLBACK_AND_RESTART), past(2, U, "b", A.ROLLBACK_AND_RESTART)),
     verdict(U, "nan_loss", A.STOP_AND_NOTIFY, 0.8), {"rollback_on_divergence": True}, A.ESCALATE, "budget"),
    # 1. low confidence: restart (plain, budgeted) and tell a human; never stop, never exclude
    ("low confidence restarts", hist(), verdict(conf=0.3), {}, A.RESTART, "low_confidence"),
    ("no signature at all restarts", hist(), verdict(K, "no_signature", A.ESCALATE, 0.0), {}, A.RESTART,
     "low_confidence"),
    ("low confidence, exact threshold passes", hist(), verdict(conf=0.6), {}, A.RESTART, "verdict"),
    ("low-confidence drain is a plain restart", hist(), verdict(H, "x", A.DRAIN_AND_RESTART, 0.3, nodes=("n1",)),
     {}, A.RESTART, "low_confidence"),
    ("low-confidence user-code stop restarts", hist(), verdict(U, "host_oom_suspected", A.STOP_AND_NOTIFY, 0.55),
     {}, A.RESTART, "low_confidence"),
    ("low confidence held when configured", hist(), verdict(U, "host_oom_suspected", A.STOP_AND_NOTIFY, 0.55),
     {"on_low_confidence": A.ESCALATE}, A.ESCALATE, "low_confidence"),
    ("low confidence held when escalations need approval", hist(), verdict(conf=0.3),
     {"require_approval": frozenset({A.ESCALATE})}, A.ESCALATE, "low_confidence"),
    # 2. the verdict escalates, or asks to stop a failure that is not the job's own: restart and tell
    ("verdict escalates: restart", hist(), verdict(N, "storage_full", A.ESCALATE, 0.9), {}, A.RESTART, "verdict"),
    ("infra stop is not a user-code stop", hist(), verdict(N, "x", A.STOP_AND_NOTIFY, 0.9), {}, A.RESTART,
     "verdict"),
    # 3. user code
    ("user code stop", hist(), verdict(U, "python_exception", A.STOP_AND_NOTIFY, 0.9), {},
     A.STOP_AND_NOTIFY, "user_code"),
    ("user code asking restart is stopped", hist(), verdict(U, "cuda_oom", A.RESTART, 0.9), {},
     A.STOP_AND_NOTIFY, "user_code"),
    ("user code asking backoff is stopped", hist(), verdict(U, "x", A.RETRY_AFTER_BACKOFF, 0.9), {},
     A.STOP_AND_NOTIFY, "user_code"),
    ("user code stop at the threshold", hist(), verdict(U, "x", A.STOP_AND_NOTIFY, 0.6), {}, A.STOP_AND_NOTIFY,
     "user_code"),
    ("user code stop ignores spent budget", hist(*[past(m, U, "a", A.ROLLBACK_AND_RESTART) for m in (1, 2, 3)]),
     verdict(U, "python_exception", A.STOP_AND_NOTIFY, 0.9), {}, A.STOP_AND_NOTIFY, "user_code"),
    # 4. evidence: node actions need a node
    ("exclude without node", hist(), verdict(H, "x", A.RESTART_EXCLUDING_NODES), {}, A.RESTART, "no_culprit"),
    ("drain without node", hist(), verdict(H, "x", A.DRAIN_AND_RESTART, ranks=(3,)), {}, A.RESTART, "no_culprit"),
    # 5. crash loop: same signature N times in a row, whatever the category
    ("crash loop at 3", hist(past(2, H, "xid79", nodes=("n1",)), past(1, H, "xid79", nodes=("n1",))),
     verdict(H, "xid79", A.RESTART, nodes=("n1",)), {}, A.ESCALATE, "crash_loop"),
    ("crash loop by ranks", hist(past(2, K, "hang", ranks=(3,)), past(1, K, "hang", ranks=(3,))),
     verdict(K, "hang", A.RESTART, 0.7, ranks=(3,)), {}, A.ESCALATE, "crash_loop"),
    ("crash loop on rollbacks", hist(past(2, U, "checkpoint_corrupt", A.ROLLBACK_AND_RESTART),
                                     past(1, U, "checkpoint_corrupt", A.ROLLBACK_AND_RESTART)),
     verdict(U, "checkpoint_corrupt", A.ROLLBACK_AND_RESTART, 0.8), {}, A.ESCALATE, "crash_loop"),
    ("low-confidence restarts also loop", hist(past(2, U, "oom?"), past(1, U, "oom?")),
     verdict(U, "oom?", A.STOP_AND_NOTIFY, 0.5), {}, A.ESCALATE, "crash_loop"),
    ("bare kills loop", hist(past(2, K, "no_signature"), past(1, K, "no_signature")),
     verdict(K, "no_signature", A.ESCALATE, 0.0), {}, A.ESCALATE, "crash_loop"),
    ("not in a row", hist(past(3, H, "xid79", nodes=("n1",)), past(2, N, "net"), past(1, H, "xid79", nodes=("n1",))),
     verdict(H, "xid79", A.RESTART, nodes=("n1",)), {}, A.RESTART, "verdict"),
    ("other culprit breaks the streak", hist(past(2, H, "xid79", nodes=("n1",)), past(1, H, "xid79", nodes=("n2",))),
     verdict(H, "xid79", A.RESTART, nodes=("n1",)), {}, A.RESTART, "verdict"),
    ("crash loop threshold 2", hist(past(1, N, "net")), verdict(), {"crash_loop": 2}, A.ESCALATE, "crash_loop"),
    # 6. node cap
    ("node cap: plain restart", hist(excluded=((10, "n1"), (5, "n2"))),
     verdict(H, "x", A.RESTART_EXCLUDING_NODES, nodes=("n3",)), {}, A.RESTART, "node_cap"),
    ("node cap counts distinct nodes", hist(excluded=((10, "n1"),)),
     verdict(H, "x", A.RESTART_EXCLUDING_NODES, nodes=("n1", "n2")), {}, A.RESTART_EXCLUDING_NODES, "verdict"),
    ("node cap window slides", hist(excluded=((120, "n1"), (90, "n2"))),
     verdict(H, "x", A.RESTART_EXCLUDING_NODES, nodes=("n3",)), {}, A.RESTART_EXCLUDING_NODES, "verdict"),
    ("node cap zero", hist(), verdict(H, "x", A.RESTART_EXCLUDING_NODES, nodes=("n1",)), {"max_excluded_nodes": 0},
     A.RESTART, "node_cap"),
    ("uncertain restarts spend the budget", hist(*[past(m, K, f"s{m}") for m in range(1, 4)]),
     verdict(K, "no_signature", A.ESCALATE, 0.0), {}, A.ESCALATE, "budget"),
    # 7./8. budgets
    ("max restarts", hist(*[past(m, subtype=f"s{m}") for m in range(1, 4)]), verdict(), {"max_restarts": 3},
     A.ESCALATE, "max_restarts"),
    ("category budget", hist(*[past(m, subtype=f"s{m}") for m in range(1, 6)]), verdict(), {},
     A.ESCALATE, "budget"),
    ("budget is per category", hist(*[past(m, H, f"s{m}") for m in range(1, 6)]), verdict(), {},
     A.RESTART, "verdict"),
    ("budget window slides", hist(*[past(61 + m, subtype=f"s{m}") for m in range(1, 6)]), verdict(), {},
     A.RESTART, "verdict"),
    ("escalations do not spend budget", hist(*[past(m, subtype=f"s{m}", action=A.ESCALATE) for m in range(1, 6)]),
     verdict(), {}, A.RESTART, "verdict"),
    ("zero budget", hist(), verdict(K, "hang", A.RESTART, 0.7), {"budgets": {K: 0}}, A.ESCALATE, "budget"),
    ("user-code rollback budget",
     hist(past(3, U, "a", A.ROLLBACK_AND_RESTART), past(2, U, "b", A.ROLLBACK_AND_RESTART)),
     verdict(U, "checkpoint_corrupt", A.ROLLBACK_AND_RESTART, 0.8), {}, A.ESCALATE, "budget"),
]


@pytest.mark.parametrize(("history", "v", "overrides", "action", "rule"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rules(history: JobHistory, v: Diagnosis, overrides: dict, action: Action, rule: str) -> None:
    d = decide(history, v, Policy(**overrides), NOW)
    assert (d.action, d.rule) == (action, rule), d.reason
    assert d.proposed is v.action
    assert d.reason


@pytest.mark.parametrize("v", [
    verdict(conf=0.1), verdict(K, "no_signature", A.ESCALATE, 0.0),
    verdict(H, "x", A.RESTART_EXCLUDING_NODES),  # no culprit: never an exclusion, a plain restart
    verdict(N, "storage_full", A.ESCALATE),
])
def test_uncertain_failures_restart_and_notify_without_waiting(v: Diagnosis) -> None:
    d = decide(hist(), v, Policy(), NOW)
    assert d.action is A.RESTART and d.notify and not d.needs_approval and d.nodes == ()


def test_confident_verdicts_do_not_notify_but_user_code_stops_do() -> None:
    assert not decide(hist(), verdict(), Policy(), NOW).notify
    assert decide(hist(), verdict(U, "python_exception", A.STOP_AND_NOTIFY), Policy(), NOW).notify


@pytest.mark.parametrize("rule_history", [
    hist(past(2, H, "xid79", nodes=("n1",)), past(1, H, "xid79", nodes=("n1",))),  # crash loop
    hist(*[past(m, H, f"s{m}") for m in range(1, 6)]),  # budget
])
def test_give_up_stops_and_an_approver_may_override(rule_history: JobHistory) -> None:
    d = decide(rule_history, verdict(H, "xid79", A.RESTART, nodes=("n1",)), Policy(), NOW)
    assert d.action is A.ESCALATE and d.needs_approval and d.on_approve is A.RESTART and d.notify


def test_crash_loop_on_approve_is_the_looping_action() -> None:
    h = hist(past(2, H, "xid79", A.DRAIN_AND_RESTART, nodes=("n1",)), past(1, H, "xid79", A.DRAIN_AND_RESTART,
                                                                            nodes=("n1",)))
    d = decide(h, verdict(H, "xid79", A.DRAIN_AND_RESTART, nodes=("n1",)), Policy(max_excluded_nodes=5), NOW)
    assert (d.action, d.on_approve) == (A.ESCALATE, A.DRAIN_AND_RESTART)


@pytest.mark.parametrize(("action", "runs", "needs"), [
    (A.DRAIN_AND_RESTART, A.RESTART_EXCLUDING_NODES, True), (A.RESTART_EXCLUDING_NODES, A.RESTART_EXCLUDING_NODES,
                                                              False), (A.RESTART, A.RESTART, False)])
def test_require_approval_default(action: Action, runs: Action, needs: bool) -> None:
    d = decide(hist(), verdict(H, "x", action, nodes=("n1",)), Policy(), NOW)
    assert d.action is runs and d.needs_approval is needs
    assert d.on_approve == (action if needs else None)
    assert d.nodes == (("n1",) if runs in (A.RESTART_EXCLUDING_NODES, A.DRAIN_AND_RESTART) else ())


def test_require_approval_configurable() -> None:
    d = decide(hist(), verdict(), Policy(require_approval=frozenset({A.RESTART})), NOW)
    assert d.needs_approval and d.on_approve is A.RESTART and d.action is A.ESCALATE


def test_nodes_only_for_node_actions() -> None:
    d = decide(hist(), verdict(H, "x", A.RESTART_EXCLUDING_NODES, nodes=("n2", "n1")), Policy(), NOW)
    assert d.nodes == ("n2", "n1")
    assert decide(hist(), verdict(H, "x", A.RESTART, nodes=("n1",)), Policy(), NOW).nodes == ()


def test_backoff_grows_exponentially_with_jitter_and_cap() -> None:
    p = Policy(backoff=Backoff(base_s=10, factor=2, max_s=100, jitter=0.0))
    retries = [past(m, action=A.RETRY_AFTER_BACKOFF, subtype=f"s{m}") for m in (3, 2, 1)]
    delays = [backoff_delay(hist(*retries[len(retries) - k:]) if k else hist(), p, NOW) for k in range(4)]
    assert delays == [10, 20, 40, 80]
    assert backoff_delay(hist(*[past(m / 10, action=A.RETRY_AFTER_BACKOFF) for m in range(9, 0, -1)]), p, NOW) == 100
    jittered = Policy(backoff=Backoff(base_s=10, jitter=0.5))
    got = {backoff_delay(JobHistory(f"job-{i}"), jittered, NOW) for i in range(20)}
    assert len(got) > 10 and all(5 <= g <= 15 for g in got)


def test_backoff_exponent_counts_only_retries_in_a_row() -> None:
    p = Policy(backoff=Backoff(base_s=10, jitter=0.0))
    h = hist(past(3, action=A.RETRY_AFTER_BACKOFF), past(2, H, "x", A.RESTART), past(1, action=A.RETRY_AFTER_BACKOFF,
                                                                                       subtype="y"))
    assert backoff_delay(h, p, NOW) == 20


def test_backoff_decision_carries_delay() -> None:
    d = decide(hist(), verdict(N, "stale", A.RETRY_AFTER_BACKOFF), Policy(backoff=Backoff(base_s=7, jitter=0)), NOW)
    assert d.delay_s == 7 and "backoff" in d.reason
    assert decide(hist(), verdict(), Policy(), NOW).delay_s == 0


def test_jitter_is_deterministic_and_bounded() -> None:
    assert jitter_unit("a", 1) == jitter_unit("a", 1)
    values = [jitter_unit("job", n) for n in range(200)]
    assert all(-1 <= v <= 1 for v in values) and min(values) < -0.5 and max(values) > 0.5


@pytest.mark.parametrize("v", [verdict(), verdict(U, "python_exception", A.STOP_AND_NOTIFY),
                               verdict(conf=0.1), verdict(H, "x", A.DRAIN_AND_RESTART, nodes=("n1",))])
def test_dry_run_decides_without_executing(v: Diagnosis) -> None:
    active = decide(hist(), v, Policy(), NOW)
    dry = decide(hist(), v, Policy(mode=Mode.DRY_RUN), NOW)
    assert dry.action is active.action and dry.rule == active.rule
    assert not dry.execute and not dry.needs_approval and dry.reason.startswith("dry-run")


def test_shadow_logs_the_policy_and_runs_the_baseline() -> None:
    d = decide(hist(), verdict(U, "python_exception", A.STOP_AND_NOTIFY), Policy(mode=Mode.SHADOW), NOW)
    assert (d.action, d.shadow_of, d.rule) == (A.RESTART, A.STOP_AND_NOTIFY, "shadow")
    assert "would stop_and_notify" in d.reason
    spent = hist(*[past(m, subtype=f"s{m}") for m in (1, 2)])
    d = decide(spent, verdict(), Policy(mode=Mode.SHADOW, max_restarts=2), NOW)
    assert d.action is A.STOP_AND_NOTIFY and d.shadow_of is A.ESCALATE


def test_pure_same_inputs_same_decision() -> None:
    h = hist(past(5, action=A.RETRY_AFTER_BACKOFF))
    v = verdict(N, "stale", A.RETRY_AFTER_BACKOFF)
    assert decide(h, v, Policy(), NOW) == decide(h, v, Policy(), NOW)
    assert isinstance(decide(h, v, Policy(), NOW), Decision)


def test_rule_order_low_confidence_before_user_code_and_evidence() -> None:
    assert decide(hist(), verdict(U, "x", A.STOP_AND_NOTIFY, 0.2), Policy(), NOW).rule == "low_confidence"
    assert decide(hist(), verdict(H, "x", A.RESTART_EXCLUDING_NODES, 0.2), Policy(), NOW).rule == "low_confidence"


def test_uncertain_restarts_stay_under_the_crash_loop_breaker() -> None:
    h = hist(*[past(m, H, "x") for m in (1, 2, 3, 4, 5)])
    d = decide(h, verdict(H, "x", A.RESTART_EXCLUDING_NODES), Policy(), NOW)
    assert (d.action, d.rule, d.on_approve) == (A.ESCALATE, "crash_loop", A.RESTART)


def test_policy_rejects_bad_config() -> None:
    with pytest.raises(ValueError):
        Policy(on_low_confidence=A.DRAIN_AND_RESTART)
    assert Policy().on_low_confidence is A.RESTART
    with pytest.raises(ValueError):
        Policy(crash_loop=1)
    with pytest.raises(ValueError):
        Policy(min_confidence=1.5)
