#!/usr/bin/env bash
# Start / stop a loopback Slurm cluster by hand (munged + slurmctld + slurmd n1..n4 on 127.0.0.1).
#   bench/slurm_cluster.sh start [DIR]   # prints the SLURM_CONF to export
#   bench/slurm_cluster.sh status [DIR]
#   bench/slurm_cluster.sh stop [DIR]
# Needs: apt-get install -y slurm-wlm munge. State, logs and the munge key live under DIR
# (default /tmp/diagnoser-slurm); free ports are picked at start.
set -euo pipefail
cmd=${1:-}
dir=${2:-/tmp/diagnoser-slurm}
case "$cmd" in
  start|stop|status) exec python3 "$(dirname "$0")/../tests/slurm_cluster.py" "$cmd" "$dir" ;;
  *) echo "usage: $0 start|stop|status [DIR]" >&2; exit 2 ;;
esac
