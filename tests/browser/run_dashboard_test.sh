#!/usr/bin/env bash
# CTest driver of the dashboard's browser test (dashboard_test.mjs): starts a local cluster
# (deploy/local-cluster.sh, in a temporary directory, on free ports unless DASHBOARD_HTTP_PORT and
# DASHBOARD_RPC_PORT say otherwise), installs puppeteer-core with `npm ci` when node_modules is
# missing (never a browser: PUPPETEER_SKIP_DOWNLOAD=1; Debian's chromium is used), runs the test
# and stops the cluster. Exits 77 (CTest: skipped) when chromium or node is not installed.
#
# Usage: tests/browser/run_dashboard_test.sh BUILD_DIR OUT_DIR     (PSTRAIN_DATA_DIR: the datasets)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:?usage: run_dashboard_test.sh BUILD_DIR OUT_DIR}
out=${2:?usage: run_dashboard_test.sh BUILD_DIR OUT_DIR}
chromium=${CHROMIUM:-/usr/bin/chromium}

if [ ! -x "$chromium" ]; then
  echo "SKIP: no chromium at $chromium (apt-get install chromium; deploy/setup.sh installs it)"
  exit 77
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are not installed (apt-get install nodejs npm; deploy/setup.sh installs them)"
  exit 77
fi
if [ ! -d "$here/node_modules/puppeteer-core" ]; then
  echo "installing puppeteer-core (npm ci, no browser download)"
  (cd "$here" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund)
fi

. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
dir=$(mktemp -d /tmp/pstrain-dashboard-test.XXXXXX)
export LOCAL_CLUSTER_DIR=$dir BUILD_DIR=$build BUILD=0 SERVERS=2 WORKERS=2
export HTTP_PORT=${DASHBOARD_HTTP_PORT:-$(free_port)} RPC_PORT=${DASHBOARD_RPC_PORT:-$(free_port)}
lc=$repo/deploy/local-cluster.sh
trap '"$lc" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$lc" up
# The REST API needs the cluster's token (local-cluster.sh's default, AUTH=1): the page gets it
# as a user would give it (localStorage), the test's own calls as a header.
PSTRAIN_TOKEN=$(cat "$dir/auth/admin-token")
export PSTRAIN_TOKEN
status=0
CHROMIUM=$chromium node "$here/dashboard_test.mjs" "http://127.0.0.1:$HTTP_PORT" "$out" || status=$?
if [ $status -ne 0 ]; then
  echo "--- coordinator log (tail) ---"
  tail -n 30 "$dir/coordinator.log" || true
fi
exit $status
