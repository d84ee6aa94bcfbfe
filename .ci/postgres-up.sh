#!/usr/bin/env bash
# postgres-up.sh - a throwaway PostgreSQL for Grace's store tests.
#
# Starts a private server (initdb into $PG_CI_DIR; Debian's own cluster,
# /etc/postgresql and /var/lib/postgresql are never touched) on 127.0.0.1 at a
# free port, creates a role and a database it owns, and prints one line on
# stdout:
#     DATABASE_URL=postgresql://grace:grace@127.0.0.1:15432/grace
# so that `export "$(bash .ci/postgres-up.sh)"` works. Progress goes to stderr.
# It also writes $PG_CI_DIR/env.sh (DATABASE_URL, GRACE_TEST_DATABASE_URL, PG*).
# Stop it with .ci/postgres-down.sh.
#
# On a fresh Debian 12 run it as root: it installs postgresql-$PG_CI_VERSION
# with apt if missing (without letting the package start its own cluster) and
# runs the server as the 'postgres' user. As any other user it runs the server
# as that user and needs PostgreSQL installed already.
#
# Durability is off (fsync, synchronous_commit, full_page_writes): tests only.
#
# Knobs: PG_CI_DIR=/tmp/grace-pg  PG_CI_PORT (default: first free of 15432-15499)
#        PG_CI_VERSION=15  PG_CI_DB=grace  PG_CI_USER=grace  PG_CI_PASSWORD=grace
set -euo pipefail

DIR=${PG_CI_DIR:-/tmp/grace-pg}
VERSION=${PG_CI_VERSION:-15}
DB=${PG_CI_DB:-grace}
ROLE=${PG_CI_USER:-grace}
PASSWORD=${PG_CI_PASSWORD:-grace}
BIN=/usr/lib/postgresql/$VERSION/bin
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "[postgres-up] $*" >&2; }
die() {
  log "ERROR: $*"
  if [ -s "$DIR/postgres.log" ]; then tail -n 20 "$DIR/postgres.log" >&2; fi
  exit 1
}

# A failed start must not leave a server behind.
started=0
cleanup_on_failure() {
  local rc=$?
  if [ "$rc" != 0 ] && [ "$started" = 1 ]; then
    PG_CI_DIR="$DIR" PG_CI_KEEP=1 bash "$HERE/postgres-down.sh" >&2 || true
  fi
}
trap cleanup_on_failure EXIT

install_postgres() {
  [ "$(id -u)" = 0 ] || die "$BIN/initdb is missing; as root: apt-get install postgresql-$VERSION"
  log "installing postgresql-$VERSION with apt"
  export DEBIAN_FRONTEND=noninteractive
  local candidate
  candidate=$(apt-cache policy "postgresql-$VERSION" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then apt-get update -qq >&2; fi
  # policy-rc.d exit 101 keeps the package from starting Debian's 'main' cluster
  local own_policy=0 rc=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt-get install -y -q --no-install-recommends "postgresql-$VERSION" > "/tmp/grace-pg-apt.log" 2>&1 || rc=$?
  if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  if [ "$rc" != 0 ]; then tail -n 20 /tmp/grace-pg-apt.log >&2; die "apt-get install failed"; fi
}

# Percent-encode for the URL, byte by byte, without needing python.
urlencode() {
  local LC_ALL=C s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [A-Za-z0-9._~-]) out+=$c ;;
      *) out+=$(printf '%%%02X' "'$c") ;;
    esac
  done
  printf '%s' "$out"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
  if [ -n "${PG_CI_PORT:-}" ]; then
    port_in_use "$PG_CI_PORT" && die "127.0.0.1:$PG_CI_PORT is already in use"
    echo "$PG_CI_PORT"
    return
  fi
  local port
  for port in $(seq 15432 15499); do
    if ! port_in_use "$port"; then echo "$port"; return; fi
  done
  die "no free port in 15432-15499; set PG_CI_PORT"
}

# ---------------------------------------------------------------- install, who runs it
[ -x "$BIN/initdb" ] || install_postgres
if [ "$(id -u)" = 0 ]; then
  OWNER=postgres
  id -u postgres > /dev/null 2>&1 || die "no 'postgres' user; reinstall postgresql-$VERSION"
  as_owner() { runuser -u postgres -- "$@"; }
else
  OWNER=$(id -un)
  as_owner() { "$@"; }
fi

# ---------------------------------------------------------------- fresh directory
if [ -s "$DIR/data/postmaster.pid" ]; then
  log "a server from $DIR may still run: stopping it first"
  PG_CI_DIR="$DIR" bash "$HERE/postgres-down.sh" >&2
fi
rm -rf "$DIR"
mkdir -p "$DIR"
chmod 755 "$DIR"   # the server user must reach data/ and sock/ inside it
install -d -m 0700 -o "$OWNER" "$DIR/data"
install -d -m 0755 -o "$OWNER" "$DIR/sock"
install -m 0644 -o "$OWNER" /dev/null "$DIR/postgres.log"
PORT=$(pick_port)

# ---------------------------------------------------------------- initdb, start
log "initdb ($("$BIN/postgres" --version)) in $DIR/data, run as $OWNER"
# local socket: trust (only the owner can reach sock/); TCP: password, as the app connects
as_owner "$BIN/initdb" -D "$DIR/data" -U postgres -E UTF8 --locale=C.UTF-8 \
  --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions \
  > "$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
cat >> "$DIR/data/postgresql.conf" <<EOF
# written by grace .ci/postgres-up.sh: a throwaway test server
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
started=1
as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 60 start > /dev/null \
  || die "the server did not start"
log "server up on 127.0.0.1:$PORT (pid $(head -n1 "$DIR/data/postmaster.pid"))"

# ---------------------------------------------------------------- role, database
quoted_password=${PASSWORD//\'/\'\'}
as_owner "$BIN/psql" -q -X -v ON_ERROR_STOP=1 -h "$DIR/sock" -p "$PORT" -U postgres -d postgres \
  -c "CREATE ROLE \"$ROLE\" LOGIN CREATEDB PASSWORD '$quoted_password'" \
  -c "CREATE DATABASE \"$DB\" OWNER \"$ROLE\"" > /dev/null || die "creating the role or database failed"

URL="postgresql://$(urlencode "$ROLE"):$(urlencode "$PASSWORD")@127.0.0.1:$PORT/$(urlencode "$DB")"
{
  printf 'export DATABASE_URL=%q GRACE_TEST_DATABASE_URL=%q\n' "$URL" "$URL"
  printf 'export PGHOST=127.0.0.1 PGPORT=%q PGUSER=%q PGPASSWORD=%q PGDATABASE=%q\n' \
    "$PORT" "$ROLE" "$PASSWORD" "$DB"
} > "$DIR/env.sh"

# prove it the way the tests will connect: over TCP, with the password
"$BIN/psql" -X -q -At "$URL" -c "select 'connected as ' || current_user || ' to ' || current_database()" >&2 \
  || die "could not log in with $URL"
log "ready; environment in $DIR/env.sh"
echo "DATABASE_URL=$URL"
