#!/usr/bin/env bash
# A sequence regression on a local cluster (deploy/local-cluster.sh): an LSTM against persistence
# and a linear AR(24) fitted in NumPy on the same windows of a seeded nonlinear series
# (tests/bench/sequence_regression.py says which). docs/BENCHMARKS.md "A sequence regression".
#
#   tests/bench/sequence_regression.sh [--epochs 20]
# Environment: SERVERS (2), WORKERS (2), HTTP_PORT (8192), RPC_PORT (7192), KEEP (0: delete the work
# directory afterwards).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EPOCHS=20
while [ $# -gt 0 ]; do
  case $1 in
    --epochs) EPOCHS=$2; shift 2 ;;
    *) sed -n '2,8p' "$0"; exit 2 ;;
  esac
done
export SERVERS=${SERVERS:-2} WORKERS=${WORKERS:-2}
export HTTP_PORT=${HTTP_PORT:-8192} RPC_PORT=${RPC_PORT:-7192} BUILD=0 AUTH=1
work=$(mktemp -d /tmp/sequence-regression.XXXXXX)
echo "sequence_regression: files in $work"
lscpu | grep -E '^Model name' || true
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' '; echo
export LOCAL_CLUSTER_DIR=$work/cluster PSTRAIN_DATA_DIR=$work/data
mkdir -p "$PSTRAIN_DATA_DIR"
cleanup() {
  "$ROOT/deploy/local-cluster.sh" down >"$work/down.log" 2>&1 || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
"$ROOT/deploy/local-cluster.sh" up >"$work/up.log" 2>&1
PSTRAIN_TOKEN=$(cat "$LOCAL_CLUSTER_DIR/auth/admin-token") /usr/bin/python3 "$ROOT/tests/bench/sequence_regression.py" \
  --url "http://127.0.0.1:$HTTP_PORT" --work "$work" --workers "$WORKERS" --servers "$SERVERS" --epochs "$EPOCHS"
