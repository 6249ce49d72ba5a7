#!/usr/bin/env bash
# A one-node Slurm on this machine, all of it under DIR: its own munge key and socket, slurm.conf, state,
# spool, logs and two free ports, so it touches no system Slurm or munge. Run as root (munged, slurmd).
#   tests/slurm/up.sh DIR      then: export SLURM_CONF=DIR/slurm.conf; sbatch ...; tests/slurm/down.sh DIR
# Needs Debian's slurm-wlm and munge (`apt-get install -y slurm-wlm munge`). No accounting database: the
# profile queries job states with squeue (profiles/slurm/config.yaml says why).
set -euo pipefail
dir=$(realpath "${1:?usage: up.sh DIR}")
for tool in munged slurmctld slurmd sbatch squeue scontrol; do
  command -v "$tool" >/dev/null || { echo "up.sh: $tool not found: apt-get install -y slurm-wlm munge" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "up.sh: a one-node Slurm needs root (munged, slurmd run as root here)" >&2; exit 2; }
export SLURM_CONF="$dir/slurm.conf"
# The executor's job step runs `srun` with every SLURM_* variable removed (snakemake-executor-plugin-slurm-
# jobstep keeps only the job's identity), so srun reads the compiled-in path: link it to this cluster's file.
# A machine with a Slurm of its own keeps it: the test cluster refuses to start there.
system_conf=/etc/slurm/slurm.conf
if [ -L "$system_conf" ] && [ ! -e "$system_conf" ]; then rm -f "$system_conf"; fi  # a dead test cluster's link
if [ -e "$system_conf" ] && [ "$(readlink "$system_conf")" != "$SLURM_CONF" ]; then
  echo "up.sh: $system_conf exists (this machine's own Slurm): not replacing it" >&2
  exit 2
fi
mkdir -p "$dir"/{state,spool,log,run}
chmod 700 "$dir" "$dir/run"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
ctld_port=$(free_port)
slurmd_port=$(free_port)

head -c 1024 /dev/urandom > "$dir/run/munge.key"
chmod 400 "$dir/run/munge.key"
munged --socket="$dir/run/munge.sock" --key-file="$dir/run/munge.key" --pid-file="$dir/run/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/run/munged.seed" --force

# MinJobAge: how long slurmctld keeps a finished job, so squeue still reports it COMPLETED or CANCELLED;
# the executor plugin polls at most every 180 s and uses squeue only when MinJobAge >= 3x its first interval.
cat > "$dir/slurm.conf" <<CONF
ClusterName=skillrepro-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
mkdir -p /etc/slurm
ln -sfn "$SLURM_CONF" "$system_conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
  if [ "$state" = idle ]; then
    echo "up.sh: one-node Slurm up: node $host ($cpus CPUs, $mem_mb MB), SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.5
done
echo "up.sh: node $host not idle after 30 s (state: ${state:-none}); see $dir/log/" >&2
exit 1
