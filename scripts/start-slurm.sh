#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying the job scripts of docs/howto/survey.md (and the opt-in test
# tests/vetting/test_slurm.py, SPECO3_SLURM=1). Everything it writes lives in STATE_DIR: the munge key, socket and
# log (in a folder of its own under /tmp, which the munge user can reach, named in STATE_DIR/munge.dir), slurm.conf,
# the daemons' state, spool, pid and log files. Nothing under /etc is changed.
#
#   scripts/start-slurm.sh start STATE_DIR   # munged, slurmctld, slurmd; waits until sinfo shows the node idle
#   export SLURM_CONF=STATE_DIR/slurm.conf   # then sbatch, squeue, sinfo, scancel talk to this cluster
#   scripts/start-slurm.sh stop STATE_DIR    # stops the three daemons it started (by their pid files)
#
# Needs root (slurmd runs jobs as their user) and Debian's slurm-wlm and munge: `start` installs them with apt-get
# when they are missing. The node gets this machine's CPUs and 80 % of its memory. SPECO3_SLURM_PORT (default 6817)
# is slurmctld's port, slurmd listens on the next one.
set -euo pipefail

die() { echo "start-slurm.sh: $*" >&2; exit 1; }
usage() { die "usage: start-slurm.sh start|stop STATE_DIR"; }
[ $# -eq 2 ] || usage
ACTION=$1
mkdir -p "$2"
S=$(cd "$2" && pwd)
CONF=$S/slurm.conf
NODE=$(hostname -s)

stop_pidfile() {  # stop the daemon whose pid the file names (when it is still that program), wait up to 20 s
    local file=$1 name=$2 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    if [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$name" ]; then
        kill "$pid"
        for _ in $(seq 100); do [ -e "/proc/$pid" ] || break; sleep 0.2; done
        if [ -e "/proc/$pid" ]; then echo "start-slurm.sh: $name ($pid) did not stop; killing it" >&2; kill -9 "$pid"; fi
    fi
    rm -f "$file"
}

stop() {
    stop_pidfile "$S/slurmd.pid" slurmd
    stop_pidfile "$S/slurmctld.pid" slurmctld
    if [ -s "$S/munge.dir" ]; then
        M=$(cat "$S/munge.dir")
        stop_pidfile "$M/munged.pid" munged
        case $M in /tmp/speco3-munge.*) rm -rf "$M" ;; esac
        rm -f "$S/munge.dir"
    fi
}

case $ACTION in
stop) stop; echo "slurm stopped ($S)"; exit 0 ;;
start) ;;
*) usage ;;
esac

[ "$(id -u)" -eq 0 ] || die "needs root (slurmd starts each job as its user)"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || die "slurmctld/munged not found and no apt-get: install Slurm and MUNGE"
    echo "installing slurm-wlm and munge (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >&2
fi
[ ! -s "$S/munge.dir" ] || die "$S already has a cluster (munge.dir); stop it first"
for f in slurmd.pid slurmctld.pid; do
    if [ -s "$S/$f" ] && [ -e "/proc/$(cat "$S/$f")" ]; then die "$S already has a running cluster ($f); stop it first"; fi
done
trap 'echo "start-slurm.sh: start failed; logs in $S/log and ${M:-the munge folder}" >&2; stop' ERR

# MUNGE: its own key (1024 random bytes, owner munge, mode 400), socket and files, run as the munge user; its folder
# is under /tmp because STATE_DIR may sit below a folder that only root can enter (pytest's temporary folders)
mkdir -p "$S/state" "$S/spool" "$S/log"
M=$(mktemp -d /tmp/speco3-munge.XXXXXX)
echo "$M" > "$S/munge.dir"
dd if=/dev/urandom of="$M/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$M"
chmod 400 "$M/munge.key"
SOCKET=$M/munge.socket
runuser -u munge -- munged --force --socket="$SOCKET" --key-file="$M/munge.key" \
    --pid-file="$M/munged.pid" --log-file="$M/munged.log" --seed-file="$M/munged.seed"
chmod 755 "$M"  # clients (sbatch, the daemons) connect to the socket

PORT=${SPECO3_SLURM_PORT:-6817}
CPUS=$(nproc)
MEM_MB=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
cat > "$CONF" <<EOF
# written by scripts/start-slurm.sh: a one-node cluster on $NODE
ClusterName=speco3
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=main Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$CONF
slurmctld -c -f "$CONF"
slurmd -f "$CONF" -N "$NODE"
for _ in $(seq 150); do
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || { echo "start-slurm.sh: node state '${state:-none}' after 30 s" >&2; false; }
trap - ERR
echo "slurm running: node $NODE idle ($CPUS CPUs, $MEM_MB MB); export SLURM_CONF=$CONF"
