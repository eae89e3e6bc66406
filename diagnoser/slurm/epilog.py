"""The `EpilogSlurmctld` entry point: start `diagnoser slurm-hook` detached and return at once.

    python3 -m diagnoser.slurm.epilog --log /var/log/diagnoser/hook.log -- [slurm-hook options]

slurmctld keeps the job COMPLETING until its epilog returns, and kills the epilog's process group
when it does: a hook started with a plain `cmd &` is often killed before it can leave that group.
This module imports nothing heavy (it returns in tens of milliseconds) and starts the hook as
`python -m diagnoser.slurm.hook <options> $SLURM_JOB_ID` in a session of its own: `Popen` returns
only after the child has called setsid() and exec'd, so the kill cannot reach it.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    log = os.devnull
    if argv[:1] == ["--log"] and len(argv) > 1:
        log, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job and not any(a.isdigit() for a in argv):
        print("diagnoser epilog: no job id ($SLURM_JOB_ID unset and none given)", file=sys.stderr)
        return 2
    if job and job not in argv:
        argv = [*argv, job]
    if log != os.devnull:
        os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    with open(log, "ab") as out:
        subprocess.Popen([sys.executable, "-m", "diagnoser.slurm.hook", *argv], stdin=subprocess.DEVNULL,
                         stdout=out, stderr=out, start_new_session=True, close_fds=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
