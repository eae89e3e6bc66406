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
