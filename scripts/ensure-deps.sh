#!/usr/bin/env bash
# Make sure the tools kiq builds with are here: a JDK 17+ (javac: `make jars` compiles kiq's
# Kafka partitioner), Python 3.11+ with venv, and wrk (the HTTP load generator `kiq bench
# lookups` drives). Maven is not needed: `make jars` runs `kiq setup`, which fetches the pinned
# jars itself; only `make lock-jars` (after a pom changes) runs Maven. Chromium (headless) is
# what the dashboard's test (tests/integration/test_dashboard.py) loads /ui in; Prometheus
# (prometheus and promtool) is what the alert rules' tests (tests/unit/deploy,
# tests/integration/test_alerts.py) run; those tests fail without them when CI=true and are
# skipped otherwise.
# On Debian/Ubuntu as root, missing ones are installed with apt-get; elsewhere this
# says what to install and fails, except for wrk, chromium and prometheus: only the
# benchmarks and those tests need them, so their absence is a warning, not a failed setup.
set -euo pipefail

missing=()
optional=()
java_ok() {
  command -v java >/dev/null 2>&1 || return 1
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
  [ -n "$v" ] && [ "$v" -ge 17 ] || return 1
  # A JRE runs the broker and Spark but cannot compile kiq's partitioner.
  command -v javac >/dev/null 2>&1
}
python_ok() {
  "${PYTHON:-python3}" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

java_ok || missing+=(openjdk-17-jdk-headless)
python_ok || missing+=(python3 python3-venv)
command -v wrk >/dev/null 2>&1 || optional+=(wrk)
command -v chromium >/dev/null 2>&1 || optional+=(chromium)
command -v promtool >/dev/null 2>&1 || optional+=(prometheus)

[ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -q || echo "note: apt-get update failed; trying with the lists there are" >&2
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing from Debian's packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  if [ ${#optional[@]} -gt 0 ]; then
    echo "installing from Debian's packages: ${optional[*]} (for the benchmarks and the dashboard's and alerts' tests)"
    # Debian's prometheus starts its daemon on :9090 where it is installed; the tests start
    # their own. With no policy of the machine's own, none is started while these install.
    policy=/usr/sbin/policy-rc.d
    own_policy=""
    if [ ! -e "$policy" ]; then
      trap 'rm -f "$policy"' EXIT
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${optional[@]}" || echo "note: could not install ${optional[*]}; only 'kiq bench lookups' (wrk), the dashboard's test (chromium) and the alerts' tests (prometheus) need them" >&2
    [ -z "$own_policy" ] || rm -f "$policy"
  fi
  exit 0
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "note: ${optional[*]} not installed; 'kiq bench lookups' needs wrk, the dashboard's test chromium, the alerts' tests prometheus (apt-get install ${optional[*]})" >&2
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "kiq needs these and cannot install them here (not root, or no apt-get): ${missing[*]}" >&2
echo "install them with your package manager, then run 'make setup' again" >&2
exit 1
