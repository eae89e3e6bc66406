"""Megatron's training loop catches a SIGTERM, saves a checkpoint and says so before it exits: the job was
stopped from outside and resumes, unless the scheduler's own line says why (a time limit) and decides."""

from triage_support import triage_files as _triage

_MEGATRON_EXIT = (
    "[default0]: [2026-09-06 17:57:02] iteration    41200/  500000 | consumed samples:     42188800 | "
    "elapsed time per iteration (ms): 5120.3 | learning rate: 2.871E-04 | global batch size:  1024 | "
    "lm loss: 2.061843E+00 |\n"
    "[default0]:saving checkpoint at iteration   41203 to /lustre/ckpt/run7 in torch_dist format\n"
    "[default0]:  successfully saved checkpoint from iteration   41203 to /lustre/ckpt/run7\n"
    "[default0]:[exiting program after receiving SIGTERM.] datetime: 2026-09-06 17:57:10 \n")


def test_a_checkpointed_exit_after_sigterm_resumes(tmp_path):
    d = _triage(tmp_path, {"slurm-1537344.out": _MEGATRON_EXIT})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "scheduler_preemption", "restart")
    assert d.culprit.nodes == []


def test_the_schedulers_time_limit_line_says_why_and_decides(tmp_path):
    d = _triage(tmp_path, {"slurm-1537344.out": _MEGATRON_EXIT + (
        "slurmstepd: error: *** JOB 1537344 ON node-002-01 CANCELLED AT 2026-09-06T17:57:12 DUE TO TIME LIMIT ***\n")})
    assert d.subtype == "scheduler_time_limit"
