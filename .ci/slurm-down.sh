#!/usr/bin/env bash
# slurm-down.sh - stop what .ci/slurm-up.sh started, and nothing else.
#
# Cancels the queue, then stops the daemons by the pid files under
# $GRACE_SLURM_DIR/run, checking each pid still runs the program we started
# (never pkill). munged is stopped only if slurm-up.sh started it. The
# /etc/hosts block goes too; the logs stay in $GRACE_SLURM_DIR/log.
set -uo pipefail

DIR=${GRACE_SLURM_DIR:-/tmp/grace-slurm}
export SLURM_CONF=$DIR/etc/slurm.conf
log() { echo "[slurm-down] $*" >&2; }
# alive PID: exists and is not a zombie (its parent may reap it late)
alive() { [ -n "$1" ] && [ -r "/proc/$1/status" ] && ! grep -q '^State:\s*Z' "/proc/$1/status"; }
stop() { # stop PIDFILE PROGRAM
  local pid; pid=$(tr -dc 0-9 < "$1" 2> /dev/null)
  if alive "$pid" && [ "$(cat "/proc/$pid/comm")" = "$2" ]; then
    kill -TERM "$pid"
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid"
    log "stopped $2 ($pid)"
  fi
  rm -f "$1"
}

[ -d "$DIR/run" ] || { log "nothing to stop in $DIR"; exit 0; }
if [ -s "$DIR/run/slurmctld.pid" ] && scontrol ping 2> /dev/null | grep -q UP; then
  scancel --full --signal=KILL --state=RUNNING 2> /dev/null; scancel --state=PENDING 2> /dev/null
  for _ in $(seq 100); do [ -z "$(squeue -h -t R,CG -o %i 2> /dev/null)" ] && break; sleep 0.1; done
fi
for f in "$DIR"/run/slurmd-*.pid; do [ -e "$f" ] && stop "$f" slurmd; done
stop "$DIR/run/slurmctld.pid" slurmctld
[ -e "$DIR/run/munged.pid" ] && stop "$DIR/run/munged.pid" munged
t=$(mktemp); sed '/^# BEGIN grace-slurm$/,/^# END grace-slurm$/d' /etc/hosts > "$t"; cat "$t" > /etc/hosts; rm -f "$t"
rm -rf "$DIR/run"
log "down; logs in $DIR/log"
