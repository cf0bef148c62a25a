#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests of profiles/slurm (docs/slurm.md):
#   scripts/local_slurm.sh start [--no-accounting]   configure and start the daemons
#   scripts/local_slurm.sh stop                      stop every daemon this script started
#   scripts/local_slurm.sh status                    sinfo and the accounting storage in use
# Installs nothing: it needs Debian's slurm-wlm and munge, and for accounting slurmdbd and
# mariadb-server (apt-get install -y slurm-wlm munge slurmdbd mariadb-server), and root.
# The node is this host with all its CPUs, in partitions `cpu` (default) and `gpu` as the
# profile names them, with a GPU GRES of 2 whose devices are stand-ins for /dev/null (GPU jobs
# get scheduled and see CUDA_VISIBLE_DEVICES; nothing is bound). A second slurmd on the same host
# is node HOST-b (port 6820, same CPUs): partition `nodes2` holds both nodes, for jobs that
# span two nodes (srun per node); the profile's partitions never use it. Accounting (the default): slurmdbd over a local MariaDB, account `ci`
# (REPRO_SLURM_ACCOUNT) enforced, so `sacct` answers as on most clusters. --no-accounting:
# AccountingStorageType=accounting_storage/none, as on many small clusters, where `sacct` only
# says "Slurm accounting storage is disabled".
# Config goes to /etc/slurm (where every SLURM command looks); a slurm.conf that this script did
# not write is never overwritten. State and logs: $REPRO_SLURM_STATE (default /tmp/repro-slurm).
set -euo pipefail

STATE=${REPRO_SLURM_STATE:-/tmp/repro-slurm}
CONF=/etc/slurm
MARK="# written by dfpo-repro scripts/local_slurm.sh"
ACCOUNT=${REPRO_SLURM_ACCOUNT:-ci}
NODE=$(hostname -s)
NODE2=$NODE-b  # a second slurmd on this host (scontrol show hostnames lists $NODE first)

die() { echo "local_slurm.sh: $*" >&2; exit 1; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll until COMMAND succeeds
  local limit=$1 what=$2; shift 2
  for ((i = 0; i < limit * 4; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  die "$what did not come up within ${limit} s (logs: $STATE)"
}

stop_pid() {  # stop_pid PIDFILE: TERM the daemon it names, wait for it to go
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill "$pid" 2>/dev/null; then
    for ((i = 0; i < 80; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  fi
  rm -f "$file"
}

write_conf() {  # write_conf ACCOUNTING(yes|no)
  if [ -f "$CONF/slurm.conf" ] && ! grep -qF "$MARK" "$CONF/slurm.conf"; then
    die "$CONF/slurm.conf exists and was not written by this script; not touching it"
  fi
  local cpus memory
  cpus=$(nproc)
  memory=$(($(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') * 9 / 10))
  mkdir -p "$CONF" "$STATE/ctld" "$STATE/d"
  {
    echo "$MARK"
    cat <<EOF
ClusterName=repro
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=1000
ReturnToService=2
GresTypes=gpu
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
# finished jobs stay visible to squeue/scontrol for 10 minutes
MinJobAge=600
# a job past its time limit gets SIGTERM, then SIGKILL 5 s later
KillWait=5
OverTimeLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory Gres=gpu:2 State=UNKNOWN
# 6819 is slurmdbd's port
NodeName=$NODE2 NodeHostname=$NODE NodeAddr=127.0.0.1 Port=6820 CPUs=$cpus RealMemory=$memory Gres=gpu:2 State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$NODE MaxTime=INFINITE State=UP
PartitionName=nodes2 Nodes=$NODE,$NODE2 MaxTime=INFINITE State=UP
EOF
    if [ "$1" = yes ]; then
      cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageEnforce=associations
AccountingStoreFlags=job_comment
AccountingStorageTRES=gres/gpu
EOF
    else
      echo "AccountingStorageType=accounting_storage/none"
    fi
  } >"$CONF/slurm.conf"
  # SLURM 22.05 counts no GPU declared without device files (Count=2 alone: the node is drained,
  # "gres/gpu count reported lower than configured (0 < 2)") and refuses regular files ("not a
  # valid character or block device"): two character devices with
  # /dev/null's numbers stand in (nothing is bound: TaskPlugin=task/none, no cgroups)
  mkdir -p "$STATE/dev"
  for i in 0 1; do [ -c "$STATE/dev/gpu$i" ] || mknod "$STATE/dev/gpu$i" c 1 3; done
  printf '%s\nNodeName=%s,%s Name=gpu File=%s/dev/gpu[0-1]\n' "$MARK" "$NODE" "$NODE2" \
    "$STATE" >"$CONF/gres.conf"
}

start_munge() {
  mkdir -p /run/munge && chown munge:munge /run/munge
  if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    wait_for 10 munged sh -c 'munge -n | unmunge'
  fi
}

start_accounting() {
  mkdir -p /run/mysqld "$STATE/mariadb" && chown mysql:mysql /run/mysqld "$STATE/mariadb"
  if ! mariadb -e 'select 1' >/dev/null 2>&1; then
    setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 \
      --pid-file="$STATE/mariadb/mariadb.pid" --log-error="$STATE/mariadb/mariadb.log" \
      </dev/null >/dev/null 2>&1 &
    wait_for 60 MariaDB mariadb -e 'select 1'
  fi
  mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'repro';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  {
    echo "$MARK"
    cat <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$STATE/slurmdbd.log
PidFile=$STATE/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=repro
StorageLoc=slurm_acct_db
EOF
  } >"$CONF/slurmdbd.conf"
  chmod 600 "$CONF/slurmdbd.conf"
  slurmdbd
  wait_for 60 slurmdbd sacctmgr -n list cluster
  # the cluster, an account and root in it (AccountingStorageEnforce=associations)
  sacctmgr -i add cluster repro >/dev/null 2>&1 || true
  sacctmgr -i add account "$ACCOUNT" cluster=repro >/dev/null 2>&1 || true
  sacctmgr -i add user root account="$ACCOUNT" cluster=repro >/dev/null 2>&1 || true
  sacctmgr -n -P list association cluster=repro user=root account="$ACCOUNT" format=account |
    grep -qx "$ACCOUNT" || die "sacctmgr did not record account $ACCOUNT for root"
}

# one line per node (sinfo -N repeats a node per partition); '*': slurmd not responding
node_state() { sinfo -h -N -n "$NODE,$NODE2" -o '%N %T' | sort -u | cut -d' ' -f2; }
node_registered() { [ "$(node_state | grep -cvE '[*]|unknown|down')" = 2 ]; }
node_idle() { [ "$(node_state | grep -cxE 'idle|mixed|allocated')" = 2 ]; }

start() {
  local accounting=yes
  case "${1:-}" in
    "") ;;
    --no-accounting) accounting=no ;;
    *) die "unknown option '$1' (start [--no-accounting])" ;;
  esac
  [ "$(id -u)" = 0 ] || die "run as root (it starts munged, slurmctld and slurmd)"
  for cmd in munged slurmctld slurmd; do
    command -v "$cmd" >/dev/null || die "$cmd not found: apt-get install -y slurm-wlm munge"
  done
  if [ $accounting = yes ]; then
    for cmd in slurmdbd mariadbd; do
      command -v "$cmd" >/dev/null ||
        die "$cmd not found: apt-get install -y slurmdbd mariadb-server (or --no-accounting)"
    done
  fi
  stop_slurm  # a running cluster is restarted with this configuration
  write_conf $accounting
  start_munge
  if [ $accounting = yes ]; then start_accounting; else stop_accounting; fi
  slurmctld
  wait_for 30 slurmctld scontrol ping
  slurmd -N "$NODE"
  slurmd -N "$NODE2"
  wait_for 30 slurmd node_registered
  # a drain left by an earlier run (a test that drains the node, a refused configuration),
  # resumed node by node: RESUME on a node that is not drained is an error ("Invalid node state")
  for node in $(sinfo -h -N -n "$NODE,$NODE2" -o '%N %T' | awk '$2 ~ /drain/ {print $1}' |
                sort -u); do
    scontrol update NodeName="$node" State=RESUME
  done
  wait_for 30 "nodes $NODE and $NODE2" node_idle
  echo "local_slurm.sh: node $NODE up (accounting: $accounting, $(nproc) CPUs, gpu:2," \
    "partitions cpu and gpu; $NODE2 beside it in partition nodes2; logs in $STATE)"
}

stop_slurm() {
  stop_pid "$STATE/slurmd-$NODE.pid"
  stop_pid "$STATE/slurmd-$NODE2.pid"
  stop_pid "$STATE/slurmctld.pid"
}

stop_accounting() {
  stop_pid "$STATE/slurmdbd.pid"
  stop_pid "$STATE/mariadb/mariadb.pid"
}

stop() {
  stop_slurm
  stop_accounting
  stop_pid /run/munge/munged.pid
  echo "local_slurm.sh: stopped"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) sinfo; scontrol show config | grep -E '^(AccountingStorageType|MinJobAge) ' ;;
  *) die "usage: $0 start [--no-accounting] | stop | status" ;;
esac
