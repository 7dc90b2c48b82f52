#!/usr/bin/env bash
# Make sure the tools kiq builds with are here: a JDK 17+ (javac: `make jars` compiles kiq's
# Kafka partitioner), Python 3.11+ with venv, and wrk (the HTTP load generator `kiq bench
# lookups` drives). Maven is not needed: `make jars` runs `kiq setup`, which fetches the pinned
# jars itself; only `make lock-jars` (after a pom changes) runs Maven. Chromium (headless) is
# what the dashboard's test (tests/integration/test_dashboard.py) loads /ui in; that test fails
# without it when CI=true and is skipped otherwise.
# On Debian/Ubuntu as root, missing ones are installed with apt-get; elsewhere this
# says what to install and fails, except for wrk and chromium: only the benchmarks and
# the dashboard's test need them, so their absence is a warning, not a failed setup.
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

[ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -q || echo "note: apt-get update failed; trying with the lists there are" >&2
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing from Debian's packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  if [ ${#optional[@]} -gt 0 ]; then
    echo "installing from Debian's packages: ${optional[*]} (for the benchmarks and the dashboard's test)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${optional[@]}" || echo "note: could not install ${optional[*]}; only 'kiq bench lookups' (wrk) and the dashboard's test (chromium) need them" >&2
  fi
  exit 0
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "note: ${optional[*]} not installed; 'kiq bench lookups' needs wrk, the dashboard's test chromium (apt-get install ${optional[*]})" >&2
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "kiq needs these and cannot install them here (not root, or no apt-get): ${missing[*]}" >&2
echo "install them with your package manager, then run 'make setup' again" >&2
exit 1
