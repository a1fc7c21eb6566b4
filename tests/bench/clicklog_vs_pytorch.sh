#!/usr/bin/env bash
# clicklog_vs_pytorch.sh — one step of the click-log model, ours against PyTorch, in one run: pstrain-train
# (the spec of clicklog_job.py: sparse tables, Adagrad) and clicklog_pt.py (nn.EmbeddingBag(sparse=True),
# Adagrad, the same tables, MLP and batch), at 1 and 2 threads, repeats interleaved (ours t1, theirs t1,
# ours t2, theirs t2, then again). Prints each run's samples/s (training steps only) and test AUC, then
# the medians and the ratio ours / theirs per thread count, with `lscpu`'s model and flags.
#
# Usage: tests/bench/clicklog_vs_pytorch.sh --data DIR [--repeats N] [--epochs E]
#   --data DIR  a dataset directory clicklog.py wrote (its parent is pstrain-train's --data-dir)
# Setup once (root): tests/bench/setup-pytorch.sh. Env: BUILD_DIR (build), PYTORCH_BENCH_DIR
# (/work/shared/bench/pytorch: openblas_env.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DATA="" REPEATS=3 EPOCHS=1
while (($#)); do
  case $1 in
    --data) DATA=$(cd "${2:?--data needs a directory}" && pwd); shift 2 ;;
    --repeats) REPEATS=${2:?}; shift 2 ;;
    --epochs) EPOCHS=${2:?}; shift 2 ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
[ -n "$DATA" ] || { sed -n '2,12p' "$0"; exit 2; }
BUILD=${BUILD_DIR:-$ROOT/build}
PT_DIR=${PYTORCH_BENCH_DIR:-/work/shared/bench/pytorch}
[ -x "$BUILD/worker/pstrain-train" ] || { echo "build pstrain-train first" >&2; exit 1; }
[ -f "$PT_DIR/openblas_env.sh" ] || { echo "run tests/bench/setup-pytorch.sh first" >&2; exit 1; }
work=$(mktemp -d /tmp/clicklog-vs-pt.XXXXXX)
lscpu | grep -E '^Model name' || true
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' '; echo
/usr/bin/python3 "$ROOT/tests/bench/clicklog_job.py" --data "$DATA" --dataset "$(basename "$DATA")" --epochs "$EPOCHS" >"$work/spec.json"
: >"$work/results"
for r in $(seq 1 "$REPEATS"); do
  for t in 1 2; do
    "$BUILD/worker/pstrain-train" --spec="$work/spec.json" --data-dir="$(dirname "$DATA")" --threads=$t 2>/dev/null |
      grep '^epoch' | tail -1 | sed "s/^/ours t$t r$r /" | tee -a "$work/results"
    (. "$PT_DIR/openblas_env.sh" && /usr/bin/python3 "$ROOT/tests/bench/clicklog_pt.py" --data "$DATA" --threads $t \
      --epochs "$EPOCHS") | grep '^epoch' | tail -1 | sed "s/^/theirs t$t r$r /" | tee -a "$work/results"
  done
done
/usr/bin/python3 - "$work/results" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, t = line.split()[0], line.split()[1]
    rate = float(re.search(r"\| ([0-9.]+) samples/s", line).group(1))
    auc = float(re.search(r"auc ([0-9.]+)", line).group(1))
    runs.setdefault((who, t), []).append((rate, auc))
print()
for t in ("t1", "t2"):
    ours, theirs = runs[("ours", t)], runs[("theirs", t)]
    o, p = statistics.median(r for r, _ in ours), statistics.median(r for r, _ in theirs)
    print(f"{t}: ours {o:,.0f} samples/s (AUC median {statistics.median(a for _, a in ours):.4f}), "
          f"PyTorch {p:,.0f} (AUC {statistics.median(a for _, a in theirs):.4f}): {o / p:.2f}x")
PY
