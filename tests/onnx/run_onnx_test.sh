#!/usr/bin/env bash
# CTest driver of onnx_runtime: exports every reference job's model (deploy/jobs/) and the models
# of tests/onnx/models/ with random parameters (onnx_fixture), checks each file with python3-onnx's
# full checker, and runs them in onnxruntime-node against the engine's outputs (compare.mjs); then,
# on a local cluster (deploy/local-cluster.sh), the same models uploaded and a trained mnist10k job
# exported through the REST API (rest_onnx.py) against the service's own :predict.
# Installs onnxruntime-node (npm ci --ignore-scripts: its CPU build is in the package) when
# node_modules is missing. Fails, never skips, when python3-onnx, node or the package is missing.
#
# Usage: tests/onnx/run_onnx_test.sh ONNX_FIXTURE OUT_DIR   (BUILD_DIR, PSTRAIN_DATA_DIR: the
# cluster's binaries and datasets)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
fixture=${1:?usage: run_onnx_test.sh ONNX_FIXTURE OUT_DIR}
out=${2:?usage: run_onnx_test.sh ONNX_FIXTURE OUT_DIR}

if ! /usr/bin/python3 -c "import onnx" 2>/dev/null; then
  echo "FAIL: python3-onnx is not installed (apt-get install python3-onnx; deploy/setup.sh installs it)"
  exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "FAIL: node and npm are not installed (deploy/setup.sh installs them)"
  exit 1
fi
if [ ! -d "$here/node_modules/onnxruntime-node" ]; then
  echo "installing onnxruntime-node (npm ci --ignore-scripts: the CPU build inside, no GPU download)"
  (cd "$here" && npm ci --ignore-scripts --no-audit --no-fund)
fi

rm -rf "$out"
mkdir -p "$out"
specs=("$repo"/deploy/jobs/*.json "$here"/models/*.json)
"$fixture" "$out" 1000 "${specs[@]}"
/usr/bin/python3 "$here/check_models.py" "$out"/*.onnx
names=()
for s in "${specs[@]}"; do names+=("$(basename "$s" .json)"); done
node "$here/compare.mjs" "$out" "${names[@]}"

# The REST API: exports of uploaded and trained models against the service's :predict.
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
dir=$(mktemp -d /tmp/pstrain-onnx-test.XXXXXX)
export LOCAL_CLUSTER_DIR=$dir BUILD=0 SERVERS=1 WORKERS=1
export HTTP_PORT=$(free_port) RPC_PORT=$(free_port)
lc=$repo/deploy/local-cluster.sh
trap '"$lc" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$lc" up >/dev/null
PSTRAIN_TOKEN=$(cat "$dir/auth/admin-token")
export PSTRAIN_TOKEN
status=0
rest=$(/usr/bin/python3 "$here/rest_onnx.py" "http://127.0.0.1:$HTTP_PORT" "$out" "$out") || status=$?
if [ $status -eq 0 ]; then
  for n in $rest; do /usr/bin/python3 "$here/check_models.py" "$out/$n.onnx"; done
  # shellcheck disable=SC2086
  node "$here/compare.mjs" "$out" $rest || status=$?
fi
if [ $status -ne 0 ]; then
  echo "--- coordinator log (tail) ---"
  tail -n 30 "$dir/coordinator.log" || true
fi
exit $status
