"""JAX's coordination service tells the surviving processes that a peer is gone: with collective cancellation their
pending collective fails with 'Task with incarnation id N is not connected', which is a lost peer to restart from,
not an exception in the survivors' own code."""

from triage_support import triage_files as _triage


def test_a_cancelled_collective_after_a_peer_died_is_a_lost_task_not_the_jobs_exception(tmp_path):
    d = _triage(tmp_path, {"process-1.log": (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 212, in <module>\n'
        "    loss = jnp.sum(step(params, batch))\n"
        "jaxlib._jax.XlaRuntimeError: FAILED_PRECONDITION: Task with incarnation id 3446767950926952685 is not "
        "connected\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "jax_task_lost", "restart")


def test_a_task_that_reconnects_with_a_new_incarnation_aborts_the_job_and_is_restarted(tmp_path):
    d = _triage(tmp_path, {"process-0.log": (
        "I1120 03:04:15.112233 1 coordination_service.cc:680] /job:jax_worker/replica:0/task:5 has connected to "
        "coordination service. Incarnation: 8813305162041953111\n"
        "E1120 03:04:55.201455 1 coordination_service.cc:702] ABORTED: /job:jax_worker/replica:0/task:5 unexpectedly "
        "tried to connect with a different incarnation. It has likely restarted.\n"
        "F1120 03:04:55.209911 1 client.h:80] Terminating process because the JAX distributed service detected fatal "
        "errors. This most likely indicates that another task died; see the other task logs for more details.\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "jax_task_restarted", "restart")
    assert d.rule == "jax-xla.coord-task-reconnected-new-incarnation"
