#!/usr/bin/env bash
# CTest driver of the Python client's tests (tests/python/test_client.py): installs the client
# with `pip install --no-index` into a fresh virtual environment (and into one that sees Debian's
# NumPy and pandas, where the tests run), starts a local cluster (deploy/local-cluster.sh, tokens
# on, free ports), runs the tests, stops the cluster. Fails (never skips) when python3-venv,
# NumPy or pandas is missing.
#
# Usage: tests/python/run_python_client_test.sh BUILD_DIR        (PSTRAIN_DATA_DIR: the datasets)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run_python_client_test.sh BUILD_DIR}" && pwd)
python=/usr/bin/python3
dir=$(mktemp -d /tmp/pstrain-python-test.XXXXXX)
# TLS=1: the REST API over HTTPS with the cluster's self-signed certificate, so every call of the
# suite goes through the client's TLS path with a CA file (PSTRAIN_CACERT).
export LOCAL_CLUSTER_DIR=$dir/cluster BUILD_DIR=$build BUILD=0 SERVERS=2 WORKERS=2 TLS=1
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
export HTTP_PORT=$(free_port) RPC_PORT=$(free_port)
lc=$repo/deploy/local-cluster.sh
trap '"$lc" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

# A bare environment: the install needs nothing from an index, the import nothing but the stdlib.
$python -m venv "$dir/bare"
"$dir/bare/bin/pip" install --quiet --no-index "$repo/clients/python"
"$dir/bare/bin/python" -c 'import pstrain; print("installed offline:", pstrain.__version__, pstrain.__file__)'
# The test environment: Debian's NumPy and pandas visible, the client installed the same way.
$python -m venv --system-site-packages "$dir/venv"
"$dir/venv/bin/pip" install --quiet --no-index "$repo/clients/python"
"$dir/venv/bin/python" -c 'import numpy, pandas' || { echo "FAIL: python3-numpy and python3-pandas are needed (deploy/setup.sh)"; exit 1; }

mkdir -p "$LOCAL_CLUSTER_DIR"
"$lc" up >/dev/null
export PSTRAIN_URL="https://127.0.0.1:$HTTP_PORT" PSTRAIN_CLUSTER_DIR=$LOCAL_CLUSTER_DIR
export PSTRAIN_CACERT=$LOCAL_CLUSTER_DIR/tls/cert.pem
PSTRAIN_TOKEN=$(cat "$LOCAL_CLUSTER_DIR/auth/admin-token")
export PSTRAIN_TOKEN
status=0
(cd "$dir" && "$dir/venv/bin/python" "$repo/tests/python/test_client.py" -v) || status=$?
if [ $status -ne 0 ]; then
  echo "--- coordinator log (tail) ---"
  tail -n 40 "$LOCAL_CLUSTER_DIR/coordinator.log" || true
fi
exit $status
