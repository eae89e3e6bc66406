"""Slurm: collect a job's evidence from a real cluster and act through it (requeue, exclude, drain).

    records    parse `scontrol show -o` / sacct / jobcomp text into typed records (pure)
    commands   `SlurmCLI`: the Slurm commands diagnoser runs, each with a timeout and a clear error
    sbatch     split and edit an `sbatch ...` command line (options, script, --exclude) (pure)
    nodelogs   per-node kernel logs: a configured log directory per node, or `srun -w NODE dmesg`
    collect    `collect_job`: a job's record, outputs, nodes and kernel logs laid out for the triage
    drain      drain with a diagnoser reason under a cluster-wide cap; resume (undrain)
    executor   `SlurmExecutor`: the restart controller's executor (sbatch, requeue, exclude, drain)
    hook       `diagnoser slurm-hook`: triage a finished job and act on it (epilog style)
    cli        `register(app)`: `collect slurm`, `nodes resume|drained`, `slurm-run`, `slurm-hook`
"""
