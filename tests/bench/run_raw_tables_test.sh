#!/usr/bin/env bash
# CTest driver of tests/bench/raw_tables.py --check: starts a local cluster (deploy/local-cluster.sh,
# a temporary directory, free ports, 2 servers and 2 workers), runs the real-table reference
# (Palmer penguins unedited and auto-mpg, fetched with `apt-get download` into WORK/.debs on first
# use) and stops the cluster. Fails when a package cannot be fetched: this test never skips.
#
# Usage: tests/bench/run_raw_tables_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:?usage: run_raw_tables_test.sh BUILD_DIR WORK_DIR}
work=${2:?usage: run_raw_tables_test.sh BUILD_DIR WORK_DIR}
mkdir -p "$work"
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
dir=$(mktemp -d /tmp/pstrain-raw-tables.XXXXXX)
export LOCAL_CLUSTER_DIR=$dir BUILD_DIR=$build BUILD=0 SERVERS=2 WORKERS=2 AUTH=0
export HTTP_PORT=$(free_port) RPC_PORT=$(free_port)
lc=$repo/deploy/local-cluster.sh
trap '"$lc" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$lc" up >/dev/null
/usr/bin/python3 "$here/raw_tables.py" --check --url "http://127.0.0.1:$HTTP_PORT" --work "$work"
