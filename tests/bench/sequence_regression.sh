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
export HTTP_PORT=${HTTP_PORT:-8192} RPC_PORT=${RPC_PORT:-7192}
. "$ROOT/tests/bench/bench_cluster.sh"
bench_cluster_up sequence-regression
/usr/bin/python3 "$ROOT/tests/bench/sequence_regression.py" \
  --url "http://127.0.0.1:$HTTP_PORT" --work "$work" --workers "$WORKERS" --servers "$SERVERS" --epochs "$EPOCHS"
