#!/usr/bin/env bash
# A real single-node Slurm 22.05 cluster with accounting (slurmdbd + MariaDB), for tests.
#
#   scripts/slurm-rig.sh start [DIR]    install (when missing) and start everything; prints env
#   scripts/slurm-rig.sh stop [DIR]     cancel jobs, stop the daemons by the PIDs in their pid files
#   scripts/slurm-rig.sh status [DIR]   which daemons run; exit 0 only when all of them do
#   scripts/slurm-rig.sh env [DIR]      the environment a client needs (SLURM_CONF=...)
#
# DIR defaults to $GPULEDGER_SLURM_DIR, else ${TMPDIR:-/tmp}/gpuledger-slurm. Everything the rig
# writes lives under DIR: configs, munge key and socket, MariaDB datadir, spool, logs, pid files.
# Facts behind every setting: shared/notes/slurm-test-rig.md. Needs root (apt, daemons as root).
#
# Cluster "gpuledger", node "$(hostname -s)" with 8 fake H100s (symlinks to /dev/null), partition
# "gpu", accounts "proj-a" and "proj-b" (user root in both), QOS "normal" and "high".
# gpuledger's prolog/epilog (deploy/slurm/) run for every job and spool its GPUs into DIR/gpu-spool.
set -euo pipefail

CMD=${1:-status}
DIR=${2:-${GPULEDGER_SLURM_DIR:-${TMPDIR:-/tmp}/gpuledger-slurm}}
DIR=$(realpath -m "$DIR")
CLUSTER=gpuledger
ACCOUNTS=(proj-a proj-b)
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
NODE=$(hostname -s)
SLURM_CONF_FILE="$DIR/etc/slurm.conf"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "slurm-rig: $*" >&2; }
die() { log "$*"; exit 1; }
trap 'log "failed at line $LINENO: $BASH_COMMAND (logs under $DIR/log)"' ERR

# --- helpers -----------------------------------------------------------------------------------

used_ports() {  # decimal local ports of every TCP socket (tcp and tcp6), any state
  local hex
  awk 'FNR > 1 && $2 ~ /:/ { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u |
    while read -r hex; do echo $(( 16#$hex )); done
}

free_port() {  # a port below the kernel's ephemeral range that no socket uses and not yet handed out
  local taken port low
  low=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  (( low > 11000 )) || low=32768
  taken=" $(used_ports | tr '\n' ' ') ${USED_PORTS:-} "
  while :; do
    port=$(( 10000 + RANDOM % (low - 10000) ))
    [[ $taken == *" $port "* ]] || break
  done
  USED_PORTS="${USED_PORTS:-} $port"
  echo "$port"
}

pid_alive() {  # pid file, expected /proc/PID/exe basename pattern
  local pidfile=$1 pattern=$2 pid exe
  [[ -s $pidfile ]] || return 1
  pid=$(<"$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ $(basename "$exe") == $pattern ]]
}

wait_for() {  # seconds, description, command...
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) > deadline )); then
      log "gave up after ${limit}s waiting for $what; logs under $DIR/log"
      return 1
    fi
    sleep 0.2
  done
}

stop_pid() {  # pid file, exe pattern, name: SIGTERM, wait, SIGKILL as a last resort
  local pidfile=$1 pattern=$2 name=$3 pid i
  if ! pid_alive "$pidfile" "$pattern"; then
    rm -f "$pidfile"
    return 0
  fi
  pid=$(<"$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    # Gone, or a zombie that nobody reaps (PID 1 in a container may not).
    if ! kill -0 "$pid" 2>/dev/null || [[ $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) == Z ]]; then
      log "stopped $name (pid $pid)"; rm -f "$pidfile"; return 0
    fi
    sleep 0.1
  done
  log "$name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

# --- install -----------------------------------------------------------------------------------

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  (( ${#missing[@]} == 0 )) && return 0
  [[ $(id -u) == 0 ]] || die "need root to apt-get install ${missing[*]}"
  command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
  log "installing ${missing[*]} (Debian packages, --no-install-recommends)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >"$DIR/log/apt.log" 2>&1; then
    # A stale package index is the usual cause; refresh once and retry.
    apt-get -o DPkg::Lock::Timeout=600 update -qq >>"$DIR/log/apt.log" 2>&1
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >>"$DIR/log/apt.log" 2>&1 \
      || die "apt-get install failed; see $DIR/log/apt.log"
  fi
}

# --- start -------------------------------------------------------------------------------------

start_munge() {
  pid_alive "$DIR/run/munged.pid" 'munged' && return 0
  install -d -m 700 -o munge -g munge "$DIR/munge"
  # The socket's directory must be world-executable so clients (sacct) can reach the socket.
  install -d -m 755 -o munge -g munge "$DIR/munge-socket"
  if [[ ! -s $DIR/munge/munge.key ]]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  fi
  chown munge:munge "$DIR/munge/munge.key"
  chmod 400 "$DIR/munge/munge.key"
  rm -f "$DIR/munge-socket/munge.socket"*
  runuser -u munge -- munged \
    --key-file="$DIR/munge/munge.key" \
    --socket="$DIR/munge-socket/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" \
    --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed" </dev/null >>"$DIR/log/daemons.out" 2>&1
  wait_for 10 "munged" test -S "$DIR/munge-socket/munge.socket"
  # munged writes its pid file in its own (munge-owned) directory; keep a copy beside the others.
  wait_for 5 "munged pid file" test -s "$DIR/munge/munged.pid"
  cp "$DIR/munge/munged.pid" "$DIR/run/munged.pid"
}

start_mariadb() {
  pid_alive "$DIR/run/mariadbd.pid" 'mariadbd' && return 0
  local port
  port=$(free_port)
  if [[ ! -d $DIR/mysql/mysql ]]; then
    install -d -m 750 -o mysql -g mysql "$DIR/mysql"
    mariadb-install-db --no-defaults --user=mysql --datadir="$DIR/mysql" \
      --auth-root-authentication-method=socket --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed; see $DIR/log/mariadb-install.log"
  fi
  install -d -m 755 -o mysql -g mysql "$DIR/mysql-run"
  mariadbd --no-defaults --user=mysql --datadir="$DIR/mysql" \
    --bind-address=127.0.0.1 --port="$port" --socket="$DIR/mysql-run/mysqld.sock" \
    --pid-file="$DIR/mysql-run/mariadbd.pid" --log-error="$DIR/log/mariadbd.log" \
    --skip-name-resolve --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=0 \
    </dev/null >>"$DIR/log/daemons.out" 2>&1 &
  disown
  wait_for 30 "mariadbd" test -S "$DIR/mysql-run/mysqld.sock"
  wait_for 30 "mariadbd to answer" mariadb --no-defaults -S "$DIR/mysql-run/mysqld.sock" -u root -e "SELECT 1"
  cp "$DIR/mysql-run/mariadbd.pid" "$DIR/run/mariadbd.pid"
  echo "$port" >"$DIR/run/mariadb.port"
  mariadb --no-defaults -S "$DIR/mysql-run/mysqld.sock" -u root <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'gpuledger-rig';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

write_configs() {
  local dbport=$(<"$DIR/run/mariadb.port") dbdport ctldport slurmdport i
  dbdport=$(free_port); ctldport=$(free_port); slurmdport=$(free_port)
  install -d -m 755 "$DIR/etc" "$DIR/dev" "$DIR/spool/ctld" "$DIR/spool/d"
  for i in 0 1 2 3 4 5 6 7; do
    # A GPU gres line needs device files; regular files are refused, /dev/null links are taken.
    ln -sfn /dev/null "$DIR/dev/nvidia$i"
  done
  local auth="socket=$DIR/munge-socket/munge.socket"
  umask 077
  cat >"$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=$auth
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbdport
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=slurm
StoragePass=gpuledger-rig
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf"
  umask 022
  cat >"$SLURM_CONF_FILE" <<EOF
# Written by scripts/slurm-rig.sh; see shared/notes/slurm-test-rig.md.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$ctldport
SlurmdPort=$slurmdport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=$auth,cred_expire=10
CredType=cred/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobRequeue=1
GresTypes=gpu
PriorityType=priority/multifactor
PriorityDecayHalfLife=7-0
PriorityCalcPeriod=1
PriorityWeightFairshare=10000
PriorityWeightQOS=10000
PriorityWeightAge=1000
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbdport
AccountingStoragePass=$DIR/munge-socket/munge.socket
AccountingStorageTRES=gres/gpu,gres/gpu:h100
AccountingStorageEnforce=associations,qos
# Test speed-ups: schedule every 5 s; let more jobs run than the machine has cores.
SchedulerParameters=sched_interval=5,bf_interval=5
Prolog=$DIR/etc/prolog
Epilog=$DIR/etc/epilog
PrologFlags=Alloc
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=32 RealMemory=64000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=gpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP TRESBillingWeights="CPU=1.0,GRES/gpu=10.0"
EOF
  cat >"$DIR/etc/gres.conf" <<EOF
NodeName=$NODE Name=gpu Type=h100 File=$DIR/dev/nvidia[0-7]
EOF
  # gpuledger's own prolog/epilog (deploy/slurm/) record each job's GPUs into DIR/gpu-spool.
  local event
  for event in prolog epilog; do
    printf '#!/bin/sh\nGPULEDGER_GPU_SPOOL=%s GPULEDGER_SLURM_GPUS_ENV=/dev/null exec %s\n' \
      "$DIR/gpu-spool" "$REPO/deploy/slurm/$event.sh" >"$DIR/etc/$event"
    chmod 755 "$DIR/etc/$event"
  done
  cat >"$DIR/env" <<EOF
export SLURM_CONF=$SLURM_CONF_FILE
EOF
}

start_slurm() {
  export SLURM_CONF=$SLURM_CONF_FILE
  if ! pid_alive "$DIR/run/slurmdbd.pid" 'slurmdbd*'; then
    slurmdbd </dev/null >>"$DIR/log/daemons.out" 2>&1
    wait_for 30 "slurmdbd" bash -c "sacctmgr -n -P show cluster >/dev/null"
  fi
  # Register the cluster before slurmctld starts so it gets its id without a restart.
  sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null 2>&1 || true
  sacctmgr -i -Q add qos high Priority=1000 >/dev/null 2>&1 || true
  local a
  for a in "${ACCOUNTS[@]}"; do
    sacctmgr -i -Q add account "$a" Cluster="$CLUSTER" Description="$a" Organization=gpuledger \
      >/dev/null 2>&1 || true
    sacctmgr -i -Q add user root Account="$a" Cluster="$CLUSTER" QOS=normal,high \
      >/dev/null 2>&1 || true
  done
  if ! pid_alive "$DIR/run/slurmctld.pid" 'slurmctld*'; then
    slurmctld </dev/null >>"$DIR/log/daemons.out" 2>&1
    wait_for 30 "slurmctld" scontrol ping
  fi
  if ! pid_alive "$DIR/run/slurmd.pid" 'slurmd*'; then
    slurmd </dev/null >>"$DIR/log/daemons.out" 2>&1
  fi
  wait_for 30 "node $NODE to be idle" bash -c \
    "sinfo -h -n '$NODE' -o '%t' | grep -Eq '^(idle|mix|alloc)'"
}

check_path() {  # munged and mariadbd run as their own users: they must reach DIR
  local p=$DIR
  while [[ $p != / ]]; do
    p=$(dirname "$p")
    if [[ -e $p ]] && (( ( 0$(stat -c %a "$p") & 01 ) == 0 )); then
      die "$p is not searchable by other users (mode $(stat -c %a "$p")); munge and mysql could not reach $DIR. Choose a DIR outside it (e.g. /tmp/gpuledger-slurm)"
    fi
  done
}

cmd_start() {
  local t0=$SECONDS
  [[ $(id -u) == 0 ]] || die "needs root (installs packages, runs daemons as root and munge)"
  check_path
  install -d -m 755 "$DIR" "$DIR/log" "$DIR/run"
  install_packages
  local t_install=$(( SECONDS - t0 ))
  start_munge
  start_mariadb
  if ! { pid_alive "$DIR/run/slurmdbd.pid" 'slurmdbd*' && pid_alive "$DIR/run/slurmctld.pid" 'slurmctld*' \
         && pid_alive "$DIR/run/slurmd.pid" 'slurmd*'; }; then
    # Fresh ports mean fresh configs: restart whatever half of Slurm is still up with them.
    stop_pid "$DIR/run/slurmd.pid" 'slurmd*' slurmd
    stop_pid "$DIR/run/slurmctld.pid" 'slurmctld*' slurmctld
    stop_pid "$DIR/run/slurmdbd.pid" 'slurmdbd*' slurmdbd
    write_configs
  fi
  start_slurm
  log "up in $(( SECONDS - t0 )) s (packages ${t_install} s); cluster $CLUSTER, node $NODE, 8 x h100"
  cat "$DIR/env"
}

cmd_stop() {
  if [[ -f $SLURM_CONF_FILE ]] && pid_alive "$DIR/run/slurmctld.pid" 'slurmctld*'; then
    # Jobs' slurmstepd processes outlive slurmd; cancel them first so no `sleep` is left behind.
    local jobs
    jobs=$(SLURM_CONF=$SLURM_CONF_FILE squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [[ -n ${jobs// } ]]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$SLURM_CONF_FILE scancel $jobs 2>/dev/null || true
      SLURM_CONF=$SLURM_CONF_FILE wait_for 15 "jobs to end" \
        bash -c '[ -z "$(squeue -h -t running,completing -o %i)" ]' || true
    fi
  fi
  # Pairs stop together (each daemon takes ~2 s); slurmdbd outlives slurmctld, the database and
  # munge outlive slurmdbd.
  stop_pid "$DIR/run/slurmd.pid" 'slurmd*' slurmd & stop_pid "$DIR/run/slurmctld.pid" 'slurmctld*' slurmctld
  wait
  stop_pid "$DIR/run/slurmdbd.pid" 'slurmdbd*' slurmdbd
  stop_pid "$DIR/run/mariadbd.pid" 'mariadbd' mariadbd & stop_pid "$DIR/run/munged.pid" 'munged' munged
  wait
}

cmd_status() {
  local ok=0 d
  for d in munged:munged mariadbd:mariadbd 'slurmdbd:slurmdbd*' 'slurmctld:slurmctld*' 'slurmd:slurmd*'; do
    if pid_alive "$DIR/run/${d%%:*}.pid" "${d#*:}"; then
      echo "${d%%:*}: running (pid $(<"$DIR/run/${d%%:*}.pid"))"
    else
      echo "${d%%:*}: stopped"; ok=1
    fi
  done
  return $ok
}

case $CMD in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) trap - ERR; cmd_status ;;
  env) cat "$DIR/env" ;;
  *) die "usage: $0 start|stop|status|env [DIR]" ;;
esac
