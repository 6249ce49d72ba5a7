#!/usr/bin/env bash
# Stop the one-node Slurm that tests/slurm/up.sh DIR started: its jobs, slurmd, slurmctld, munged.
set -uo pipefail
dir=$(realpath "${1:?usage: down.sh DIR}")
export SLURM_CONF="$dir/slurm.conf"
[ -f "$SLURM_CONF" ] && scancel --full --quiet --partition debug 2>/dev/null
for name in slurmd slurmctld munged; do
  pidfile="$dir/run/$name.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || continue
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
done
# the link up.sh made, and only that
[ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$SLURM_CONF" ] && rm -f /etc/slurm/slurm.conf
exit 0
