#!/usr/bin/env bash
# Installs what the observability tests drive for real (docs/observability.md):
# Debian's prometheus (and promtool) for the scrape and alerting-rule tests, and
# Debian's chromium with chromium-driver for the dashboard's browser test, and
# Debian's fio, the storage limit `grace bench storage` is measured against.
# Idempotent: a tool already on the machine is left as it is. As root, with apt.
# The prometheus package would start its own server and node exporter: a
# policy-rc.d that says "no" keeps it from starting anything (the tests start
# their own Prometheus on a free port, with their own config).
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v fio >/dev/null 2>&1 || need+=(fio)
if [ "${#need[@]}" = 0 ]; then
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "observe-tools.sh: as root: apt-get install ${need[*]}" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
candidate=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then apt-get update -qq >&2; fi
own_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  own_policy=1
fi
rc=0
apt-get install -y -q "${need[@]}" > /tmp/grace-observe-apt.log 2>&1 || rc=$?
if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
if [ "$rc" != 0 ]; then
  tail -n 20 /tmp/grace-observe-apt.log >&2
  echo "observe-tools.sh: apt-get install ${need[*]} failed" >&2
  exit 1
fi
# a package that started a server anyway (no policy-rc.d honoured): stop it
pkill -x prometheus 2>/dev/null || true
pkill -f prometheus-node-exporter 2>/dev/null || true
