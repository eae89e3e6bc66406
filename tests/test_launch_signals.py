"""The signal torchrun's agent received says who ended the job: SIGHUP only comes from the session that started it
closing (schedulers send SIGTERM/SIGKILL), so it is the job's launch to fix; SIGTERM alone says nothing of who sent
it; and any failure the job logged first outweighs either."""

from triage_support import triage_files as _triage

AGENT = "W1120 03:14:07.512000 4015698 torch/distributed/elastic/agent/server/api.py:719] "
HANGUP = (AGENT + "Received Signals.SIGHUP death signal, shutting down workers\n"
          + AGENT + "Sending process 2928786 closing signal SIGHUP\n"
          + AGENT + "Sending process 2928787 closing signal SIGHUP\n")


def test_a_hangup_signal_is_the_session_that_launched_the_job(tmp_path):
    d = _triage(tmp_path, {"launcher.log": HANGUP})
    assert (d.category.value, d.subtype, d.action.value) == ("user_code", "launch_session_hangup", "stop_and_notify")


def test_a_termination_signal_is_not_read_as_a_hangup(tmp_path):
    d = _triage(tmp_path, {"launcher.log": HANGUP.replace("SIGHUP", "SIGTERM")})
    assert d.subtype != "launch_session_hangup"


def test_the_jobs_own_failure_before_the_hangup_decides(tmp_path):
    d = _triage(tmp_path, {"launcher.log": (
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
        "of 79.10 GiB of which 1.19 GiB is free.\n" + HANGUP)})
    assert d.subtype == "cuda_oom"
