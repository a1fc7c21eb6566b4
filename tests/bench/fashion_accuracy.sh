#!/usr/bin/env bash
# fashion_accuracy.sh — the TensorFlow custom-training-loop tutorial's Fashion-MNIST CNN for 10
# epochs (deploy/jobs/fashion-mnist-cnn-10.json) on the official data (Debian's
# dataset-fashion-mnist), checked against the tutorial's figure: test accuracy >= 0.905 (the
# tutorial reports 90.86% after 10 epochs). Slow (minutes): not part of CTest, whose
# fashion_accuracy_tests runs the 1-epoch job.
#
# Usage: tests/bench/fashion_accuracy.sh [--trainer] [--min ACCURACY]
#   default     a local cluster (deploy/local-cluster.sh run), 2 servers and 2 workers, sync
#   --trainer   the standalone trainer (pstrain-train, one thread per core) instead
# Env: BUILD_DIR (build), PSTRAIN_DATA_DIR (default: deploy/data-dir.sh's choice).
# Prints the coordinator's (or trainer's) epoch lines and "fashion_accuracy: X (>= MIN: ok|FAIL)";
# exits 1 below the bar.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
mode=cluster min=0.905
while [ $# -gt 0 ]; do
  case $1 in
    --trainer) mode=trainer; shift ;;
    --min) min=$2; shift 2 ;;
    *) echo "usage: $0 [--trainer] [--min ACCURACY]" >&2; exit 2 ;;
  esac
done
source "$repo/deploy/data-dir.sh"
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build="$repo/$build" ;; esac
work=$(mktemp -d /tmp/pstrain-fashion.XXXXXX)
# The logs stay when the run fails (the cluster's are in $work/cluster).
trap 'status=$?; if [ $status = 0 ]; then rm -rf "$work"; else echo "fashion_accuracy: logs in $work" >&2; fi' EXIT
spec=$repo/deploy/jobs/fashion-mnist-cnn-10.json
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call

start=$(date +%s)
if [ "$mode" = trainer ]; then
  "$build/worker/pstrain-train" --spec "$spec" --data-dir "$PSTRAIN_DATA_DIR" | tee "$work/out.log"
else
  python3 - "$spec" "$work/job.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["training"].update(workers=2, servers=2)
json.dump(s, open(sys.argv[2], "w"))
PY
  LOCAL_CLUSTER_DIR=$work/cluster RPC_PORT=$(free_port) HTTP_PORT=$(free_port) BUILD_DIR=$build BUILD=0 \
    "$repo/deploy/local-cluster.sh" run "$work/job.json" | tee "$work/out.log"
fi
accuracy=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/out.log" | tail -1)
[ -n "$accuracy" ] || { echo "fashion_accuracy: no final test accuracy in the output" >&2; exit 1; }
if python3 -c "import sys; sys.exit(0 if float('$accuracy') >= float('$min') else 1)"; then
  verdict=ok
else
  verdict=FAIL
fi
echo "fashion_accuracy: $accuracy (>= $min: $verdict, $mode, $(( $(date +%s) - start )) s)"
[ "$verdict" = ok ]
