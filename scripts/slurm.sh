#!/usr/bin/env bash
# A throwaway single-node Slurm for the tests (after ../shared/notes/slurm-single-node.md):
#   scripts/slurm.sh start DIR   prints the path of its slurm.conf (export it as SLURM_CONF)
#   scripts/slurm.sh stop DIR
# munge, slurmctld and slurmd from Debian's packages (installed if missing), everything under DIR,
# on loopback, as root, without systemd or cgroups.
set -euo pipefail
cmd=$1
dir=$2
case "$cmd" in
  start)
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
      echo "installing Slurm and munge (Debian's slurm-wlm, munge)..." >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >&2
    fi
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
    chmod 755 "$dir" "$dir/munge"
    p=$(dirname "$dir"); while [ "$p" != / ]; do chmod a+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
    dd if=/dev/urandom bs=1024 count=1 of="$dir/munge/munge.key" 2>/dev/null
    chown -R munge "$dir/munge"
    chmod 400 "$dir/munge/munge.key"
    runuser -u munge -- munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed"
    host=$(hostname -s)
    free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    cat > "$dir/slurm.conf" <<CONF
ClusterName=databuild-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
SlurmUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=300
SchedulerParameters=sched_interval=1
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    slurmctld -f "$dir/slurm.conf"
    slurmd -f "$dir/slurm.conf"
    export SLURM_CONF="$dir/slurm.conf"
    for _ in $(seq 100); do
      sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break
      sleep 0.2
    done
    sinfo -h -o %t | grep -qE '^(idle|mix|alloc)' || { echo "slurm did not come up; see $dir/log" >&2; exit 1; }
    echo "$dir/slurm.conf"
    ;;
  stop)
    pids=""
    for file in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
      [ -f "$file" ] && pids="$pids $(cat "$file")"
    done
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    # Wait for them to go, so that DIR can be removed (slurmctld saves its state on the way out).
    for _ in $(seq 100); do
      alive=""
      for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
      [ -z "$alive" ] && break
      sleep 0.1
    done
    ;;
esac
