#!/usr/bin/env bash
# postgres-down.sh - stop the server .ci/postgres-up.sh started and delete its directory.
#
# Stops only the server of $PG_CI_DIR/data, with that server's own pg_ctl
# (fast shutdown; immediate if that times out), run as the data directory's
# owner. Nothing else is signalled. Safe to run when nothing is running.
# Knobs: PG_CI_DIR=/tmp/grace-pg  PG_CI_KEEP=1 keeps the directory.
set -uo pipefail

DIR=${PG_CI_DIR:-/tmp/grace-pg}
DATA=$DIR/data
log() { echo "[postgres-down] $*" >&2; }

stop_server() {
  local bin owner
  bin=/usr/lib/postgresql/$(cat "$DATA/PG_VERSION")/bin
  owner=$(stat -c %U "$DATA")
  run() { if [ "$(id -u)" = 0 ]; then runuser -u "$owner" -- "$@"; else "$@"; fi; }
  if ! run "$bin/pg_ctl" -D "$DATA" status > /dev/null 2>&1; then
    log "no server running for $DATA"
    return
  fi
  if run "$bin/pg_ctl" -D "$DATA" -m fast -w -t 30 stop > /dev/null 2>&1; then
    log "stopped the server of $DATA"
  else
    log "fast shutdown timed out: immediate shutdown"
    run "$bin/pg_ctl" -D "$DATA" -m immediate -w -t 30 stop > /dev/null 2>&1 \
      || log "could not stop the server of $DATA"
  fi
}

if [ -s "$DATA/PG_VERSION" ]; then
  stop_server
else
  log "no data directory in $DIR"
fi

if [ "${PG_CI_KEEP:-0}" = 1 ]; then
  log "kept $DIR"
else
  rm -rf "$DIR"
  log "removed $DIR"
fi
