#!/usr/bin/env bash
# slurm-up.sh - a real, throwaway 4-node Slurm on this one host, for Grace's tests
# and for trying Grace against Slurm on a laptop (see docs/slurm.md).
#
# What it starts (Debian 12's slurm-wlm 22.05, installed with apt if missing):
#   munged (reused if one already answers), slurmctld on 127.0.0.1:$GRACE_SLURM_PORT,
#   and one slurmd per node n1..n4. Debian builds Slurm with MULTIPLE_SLURMD, so
#   several slurmd share one host, each on its own port; each runs in its own UTS
#   namespace so `hostname` in a job prints its node's name, and /etc/hosts maps
#   n1..n4 to 127.0.0.1 so a torchrun rendezvous on "n1" works.
# The cluster Grace's tests expect:
#   every node: 8 CPUs, 16 GB, Gres=gpu:8 backed by fake char devices (Slurm 22.05
#   drops a GPU GRES without File=; nothing stands behind the devices, CUDA sees none)
#   topology/tree: leaf1 = n[1-2], leaf2 = n[3-4], spine above them
#   partition gpu (default); no slurmdbd: job-completion records in a text file,
#   read with `sacct -c`.
#
# Usage (as root):  export "$(bash .ci/slurm-up.sh)"      # prints SLURM_CONF=... on stdout
#                   bash .ci/slurm-down.sh
# Progress goes to stderr. Everything lives under $GRACE_SLURM_DIR (default /tmp/grace-slurm).
# Knobs: GRACE_SLURM_DIR  GRACE_SLURM_PORT=16817 (slurmd ports follow it: +1 .. +4)
set -euo pipefail

DIR=${GRACE_SLURM_DIR:-/tmp/grace-slurm}
CTLD_PORT=${GRACE_SLURM_PORT:-16817}
NODES=(n1 n2 n3 n4)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "[slurm-up] $*" >&2; }
die() { log "ERROR: $*"; for f in "$DIR"/log/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done; exit 1; }
wait_for() { # wait_for SECONDS WHAT COMMAND...: poll every 0.2 s
  local end=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" > /dev/null 2>&1; do [ "$(date +%s)" -lt "$end" ] || die "timed out waiting for $what"; sleep 0.2; done
}
[ "$(id -u)" = 0 ] || { echo "slurm-up.sh must run as root (apt, mknod, unshare, /etc/hosts)" >&2; exit 1; }

# A cluster of ours still running: stop it, so the tests always start from idle nodes.
[ -d "$DIR/run" ] && GRACE_SLURM_DIR="$DIR" bash "$HERE/slurm-down.sh" >&2

# 1. packages, without letting their own services start (we start exactly what we need)
missing=()
for cmd_pkg in munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
  command -v "${cmd_pkg%%:*}" > /dev/null || missing+=("${cmd_pkg#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" > "$DIR.apt.log" 2>&1; }
  apt_install || { apt-get update -qq && apt_install; } || { rm -f /usr/sbin/policy-rc.d; tail "$DIR.apt.log" >&2; die "apt-get failed"; }
  rm -f /usr/sbin/policy-rc.d
fi

# The clients must never talk to someone else's daemons on our ports.
for p in "$CTLD_PORT" $(seq $((CTLD_PORT + 1)) $((CTLD_PORT + ${#NODES[@]}))); do
  (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null && die "127.0.0.1:$p is in use; set GRACE_SLURM_PORT"
done

# 2. a fresh tree: the daemons run as user slurm and must write state and logs
rm -rf "$DIR"; mkdir -p "$DIR"/{etc,state,spool,log,run,dev}
chown slurm:slurm "$DIR"/state "$DIR"/log "$DIR"/run
for g in 0 1 2 3 4 5 6 7; do mknod "$DIR/dev/nvidia$g" c 195 "$g" 2> /dev/null || : > "$DIR/dev/nvidia$g"; done
HOST=$(hostname -s)
export SLURM_CONF=$DIR/etc/slurm.conf

echo "NodeName=n[1-4] Name=gpu File=$DIR/dev/nvidia[0-7]" > "$DIR/etc/gres.conf"
cat > "$DIR/etc/topology.conf" << EOF
SwitchName=leaf1 Nodes=n[1-2]
SwitchName=leaf2 Nodes=n[3-4]
SwitchName=spine Switches=leaf[1-2]
EOF
# Settings that matter to Grace are commented; the rest is the minimum slurmctld needs.
cat > "$SLURM_CONF" << EOF
ClusterName=grace-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=slurm
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
# no cgroups: works in any container; processes are tracked by parentage
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# batch_sched_delay=0: a job starts on the next 1 s scheduler tick, not up to 3 s later
SchedulerParameters=batch_sched_delay=0
# a node Grace or a person drained stays drained across slurmd restarts
ReturnToService=2
# the nodes advertise 8 CPUs / 16 GB even on a 2-core host
SlurmdParameters=config_overrides
# ended jobs stay in 'scontrol show job' for 10 minutes, then only sacct -c knows them
MinJobAge=600
# seconds between the SIGTERM and the SIGKILL of a cancelled or timed-out job
KillWait=10
GresTypes=gpu
TopologyPlugin=topology/tree
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
MailProg=/bin/true
NodeName=n[1-4] NodeAddr=127.0.0.1 Port=[$((CTLD_PORT + 1))-$((CTLD_PORT + 4))] CPUs=8 RealMemory=16000 Gres=gpu:8 State=UNKNOWN
PartitionName=gpu Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
EOF
echo "export SLURM_CONF=$SLURM_CONF" > "$DIR/env.sh"

# 3. node names -> loopback, in a marked block that slurm-down.sh removes
sed -i '/^# BEGIN grace-slurm$/,/^# END grace-slurm$/d' /etc/hosts 2> /dev/null \
  || { t=$(mktemp); sed '/^# BEGIN grace-slurm$/,/^# END grace-slurm$/d' /etc/hosts > "$t"; cat "$t" > /etc/hosts; rm "$t"; }
names="${NODES[*]}"; getent hosts "$HOST" > /dev/null || names="$names $HOST"
printf '# BEGIN grace-slurm\n127.0.0.1 %s\n# END grace-slurm\n' "$names" >> /etc/hosts

# 4. daemons: munged, slurmctld, one slurmd per node
if ! munge -n 2> /dev/null | unmunge > /dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || { mungekey --create --force; chown munge:munge /etc/munge/munge.key; }
  install -d -o munge -g munge /run/munge "$DIR/munge"
  runuser -u munge -- munged --force --pid-file="$DIR/munge/munged.pid" \
    --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/seed" || die "munged did not start"
  cp "$DIR/munge/munged.pid" "$DIR/run/munged.pid"  # ours: slurm-down.sh stops it
  wait_for 10 munged sh -c 'munge -n | unmunge'
fi
slurmctld || die "slurmctld did not start"
wait_for 30 slurmctld sh -c 'scontrol ping | grep -q UP'
uts=1; unshare --uts true 2> /dev/null || { uts=0; log "no UTS namespaces here: hostname in jobs is $HOST"; }
for n in "${NODES[@]}"; do
  mkdir -p "$DIR/spool/$n"
  if [ $uts = 1 ]; then unshare --uts sh -c "hostname $n && exec slurmd -N $n" || die "slurmd $n"
  else slurmd -N "$n" || die "slurmd $n"; fi
done
wait_for 60 "4 idle nodes" sh -c '[ "$(sinfo -h -N -o %T | grep -cx idle)" = 4 ]'

# 5. warm-up: the first job waits ~3 s for slurmctld's first scheduling pass; pay it here
jid=$(sbatch --parsable -N 2 --gres=gpu:8 -o /dev/null --wrap 'srun hostname')
wait_for 60 "warm-up job $jid" sh -c "scontrol -o show job $jid | grep -q JobState=COMPLETED"
log "up: $(sinfo -h -o '%D nodes %P %G %T') | $(scontrol show topology | tr '\n' ';')"
echo "SLURM_CONF=$SLURM_CONF"
