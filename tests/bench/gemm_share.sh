#!/usr/bin/env bash
# gemm_share.sh — how much of a one-thread training run is matrix products, ours and PyTorch's.
#
# Both trainers call the same OpenBLAS (PyTorch through tests/bench/setup-pytorch.sh's copy,
# pstrain linked against Debian's), so on a job whose time is mostly GEMM neither can be much
# faster than the other: if a fraction f of PyTorch's time is OpenBLAS, and we do the same
# products at the same speed, we are at most 1 / f times as fast as PyTorch, even with nothing
# else left. The script measures f for each job, with perf, and prints it beside the ratio.
#
# Usage: tests/bench/gemm_share.sh [--data-dir DIR] [--delay-ms MS] [--ours-delay-ms MS] SPEC...
#   Runs, per spec, `pstrain-train --threads 1` and `pt_job.py --threads 1` under `perf record`
#   (sampling from --delay-ms after PyTorch's start, default 5000, and --ours-delay-ms after
#   ours, default 500, to leave out start-up: loading Python, torch and the data; give specs
#   epochs enough to train well past that), and prints a Markdown row: samples/s of each (the median of
#   the per-epoch figures without epoch 1, as suite.sh), their ratio, each one's share of CPU
#   samples in OpenBLAS (libopenblas*: the kernels, the packing copies) and 1 / PyTorch's share.
#   Specs from `suite_jobs.py prepare` (--data-dir: its data directory) run as the suite runs them.
# Needs: perf (Debian's linux-perf), a build (PSTRAIN_BUILD_DIR, default build/), PyTorch as
# tests/bench/setup-pytorch.sh installs it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${PSTRAIN_BUILD_DIR:-$ROOT/build}
PT_DIR=${PYTORCH_BENCH_DIR:-/work/shared/bench/pytorch}
DATA=${PSTRAIN_DATA_DIR:-$ROOT/data}
DELAY=5000
OURS_DELAY=500
specs=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --data-dir) DATA=$2; shift 2 ;;
    --delay-ms) DELAY=$2; shift 2 ;;
    --ours-delay-ms) OURS_DELAY=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) specs+=("$1"); shift ;;
  esac
done
[[ ${#specs[@]} -gt 0 ]] || { echo "gemm_share.sh: no spec given (--help)" >&2; exit 2; }
command -v perf >/dev/null || { echo "gemm_share.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gemm-share.XXXXXX")

# Share (percent) of the samples in `data` that fall in OpenBLAS.
blas_share() {
  perf report -i "$1" --stdio -g none --sort dso -F overhead,dso 2>/dev/null |
    awk '/openblas/ { sub("%", "", $1); s += $1 } END { printf "%.1f", s }'
}
rate() { /usr/bin/python3 "$HERE/suite_jobs.py" parse "$1" | cut -d' ' -f1; }

echo "| job | ours 1 thr samples/s | PyTorch 1 thr samples/s | ours / PyTorch | ours: % in OpenBLAS | PyTorch: % in OpenBLAS | at most (1 / PyTorch's share) |"
echo "|---|---|---|---|---|---|---|"
for spec in "${specs[@]}"; do
  name=$(basename "$spec" .json)
  perf record -q -F 499 -D "$OURS_DELAY" -o "$WORK/$name-ours.data" -- \
    "$BUILD/worker/pstrain-train" --spec "$spec" --data-dir "$DATA" --threads 1 > "$WORK/$name-ours.log" 2>&1
  # shellcheck disable=SC1091
  (. "$PT_DIR/openblas_env.sh" && perf record -q -F 499 -D "$DELAY" -o "$WORK/$name-pt.data" -- \
    /usr/bin/python3 "$HERE/pt_job.py" --spec "$spec" --data-dir "$DATA" --threads 1) > "$WORK/$name-pt.log" 2>&1
  ours=$(rate "$WORK/$name-ours.log") pt=$(rate "$WORK/$name-pt.log")
  ours_share=$(blas_share "$WORK/$name-ours.data") pt_share=$(blas_share "$WORK/$name-pt.data")
  awk -v n="$name" -v o="$ours" -v p="$pt" -v os="$ours_share" -v ps="$pt_share" 'BEGIN {
    printf "| %s | %.0f | %.0f | %.2f | %.1f | %.1f | %.2f |\n", n, o, p, o / p, os, ps, (ps > 0 ? 100 / ps : 0) }'
done
echo
echo "(perf record -F 499 from ${OURS_DELAY} ms after our start and ${DELAY} ms after PyTorch's; logs and profiles in $WORK)"
