#!/usr/bin/env bash
# ASHA against grid search over the same 16 Fashion-MNIST MLP configurations on a local cluster of
# 4 workers and 4 servers (one worker and one server per trial, 4 trials at once): starts the
# cluster (deploy/local-cluster.sh, built binaries), runs study_bench.py, prints the machine
# (lscpu) and the table, stops the cluster. See docs/BENCHMARKS.md "Studies".
#
# Usage: tests/bench/study_bench.sh [--repeat N] [--epochs E] [--factor F]    (BUILD_DIR: build; PSTRAIN_DATA_DIR: the datasets)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/pstrain-study-bench.XXXXXX)
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
export LOCAL_CLUSTER_DIR=$dir BUILD=0 SERVERS=4 WORKERS=4 AUTH=0
export HTTP_PORT=${HTTP_PORT:-$(free_port)} RPC_PORT=${RPC_PORT:-$(free_port)}
trap '"$repo/deploy/local-cluster.sh" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
lscpu | grep -E "^(Model name|CPU\(s\))"
echo "ISA: $(lscpu | grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile' | sort -u | tr '\n' ' ')"
"$repo/deploy/local-cluster.sh" up >/dev/null
/usr/bin/python3 "$repo/tests/bench/study_bench.py" "http://127.0.0.1:$HTTP_PORT" "$@"
