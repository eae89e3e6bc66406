#!/bin/sh
# EpilogSlurmctld=/etc/slurm/epilog-diagnoser.sh   (slurm.conf; slurmctld reads it at start)
# slurmctld runs this as SlurmUser with a bare environment when any job ends. diagnoser.slurm.epilog
# starts `diagnoser slurm-hook $SLURM_JOB_ID` in a session of its own and returns at once; the hook
# acts only on jobs submitted with --comment=diagnoser (--opt-in '' for every job).
export PATH=/usr/local/bin:/usr/bin:/bin
exec python3 -m diagnoser.slurm.epilog --log /var/log/diagnoser/hook.log -- \
    --state-dir /var/lib/diagnoser/slurm --config /etc/diagnoser/policy.yaml \
    --kernel-log-dir '/var/log/nodes/{node}' --max-drains 2
