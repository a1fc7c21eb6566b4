#!/usr/bin/env bash
# precision_bench.sh — mixed precision (issue 53): each CNN job in float32 and in mixed_bfloat16,
# ours (pstrain-train) and PyTorch's (tests/bench/pt_job.py, CPU autocast to bfloat16), in one run,
# interleaved (per repeat: ours-f32, pt-f32, ours-bf16, pt-bf16), on the same specs and files
# (tests/bench/suite_jobs.py prepare). Prints samples/s (median of each run's epochs after the
# first), the ratios, and each config's final test accuracy.
#
#   tests/bench/precision_bench.sh [--jobs REGEX] [--epochs E] [--limit N] [--repeats R] [--threads T]
#     --jobs     default '^(fashion-cnn|fashion-resnet|tpu-cnn)$'
#     --epochs   per run (default 2: one timed after the warm-up)
#     --limit    train on the first N examples (default 6000; 0: the whole dataset)
#     --repeats  default 1; --threads: compute threads of both sides (default 1)
# Env: PSTRAIN_DATA_DIR (default <repo>/../shared/data), PSTRAIN_BUILD_DIR (default <repo>/build),
#      PYTORCH_BENCH_DIR (default /work/shared/bench/pytorch). Setup: tests/bench/setup-pytorch.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/bench
JOBS='^(fashion-cnn|fashion-resnet|tpu-cnn)$' EPOCHS=2 LIMIT=6000 REPEATS=1 THREADS=1
while (($#)); do
  case $1 in
    --jobs) JOBS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
PY=/usr/bin/python3
DATA=$(cd "${PSTRAIN_DATA_DIR:-$ROOT/../shared/data}" && pwd)
BUILD=$(cd "${PSTRAIN_BUILD_DIR:-$ROOT/build}" && pwd)
TRAIN=$BUILD/worker/pstrain-train
PT_DIR=${PYTORCH_BENCH_DIR:-/work/shared/bench/pytorch}
pt() { (. "$PT_DIR/openblas_env.sh" && "$PY" "$@"); }
. "$HERE/levels.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench_precision.XXXXXX")
JOBLIST=$(pt "$HERE/suite_jobs.py" prepare --work "$WORK" --data "$DATA" --jobs "$JOBS" --epochs "$EPOCHS" --limit "$LIMIT")
echo "command: $0 --jobs '$JOBS' --epochs $EPOCHS --limit $LIMIT --repeats $REPEATS --threads $THREADS"
bench_machine "$TRAIN"
echo "pstrain: git $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo ', tree dirty'); logs: $WORK"
RESULTS=$WORK/results.tsv
: >"$RESULTS"
run() {  # JOB CONFIG REP CMD...
  local job=$1 config=$2 rep=$3; shift 3
  local log=$WORK/$job-$config-r$rep.log
  if ! "$@" >"$log" 2>&1; then echo "FAILED: $job $config (log: $log)" >&2; tail -5 "$log" >&2; return 0; fi
  local res; res=$("$PY" "$HERE/suite_jobs.py" parse "$log")
  printf '%s\t%s\t%s\n' "$job" "$config" "$res" >>"$RESULTS"
  echo "  $job $config r$rep: $res" >&2
}
while IFS=$'\t' read -r job label _; do
  echo "$job: $label" >&2
  spec=$WORK/specs/$job.json
  "$PY" - "$spec" <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1]))
s["precision"] = "mixed_bfloat16"
json.dump(s, open(sys.argv[1].replace(".json", "-bf16.json"), "w"), indent=1)
PYEOF
  for ((r = 1; r <= REPEATS; r++)); do
    run "$job" ours-f32 $r "$TRAIN" --spec "$spec" --data-dir "$WORK/data" --threads "$THREADS" --parallelism batch
    run "$job" pt-f32 $r pt "$HERE/pt_job.py" --spec "$spec" --data-dir "$WORK/data" --threads "$THREADS"
    run "$job" ours-bf16 $r "$TRAIN" --spec "${spec%.json}-bf16.json" --data-dir "$WORK/data" --threads "$THREADS" --parallelism batch
    run "$job" pt-bf16 $r pt "$HERE/pt_job.py" --spec "${spec%.json}-bf16.json" --data-dir "$WORK/data" --threads "$THREADS"
  done
done <<<"$JOBLIST"
grep -h "mixed_bfloat16" "$WORK"/*ours-bf16*.log | sort -u | sed 's/^/ours: /' || true
"$PY" - "$RESULTS" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    job, config, res = line.rstrip("\n").split("\t")
    sps, acc, _ = res.split()
    rows.setdefault((job, config), []).append((float(sps), float(acc)))
jobs = list(dict.fromkeys(j for j, _ in rows))
med = {k: statistics.median(x[0] for x in v) for k, v in rows.items()}
acc = {k: statistics.median(x[1] for x in v) for k, v in rows.items()}
cfg = ["ours-f32", "ours-bf16", "pt-f32", "pt-bf16"]
r = lambda j, a, b: f"{med[(j, a)] / med[(j, b)]:.2f}" if (j, a) in med and (j, b) in med else "-"
print("\n| job | " + " | ".join(cfg) + " | ours bf16 / f32 | PyTorch bf16 / f32 | ours bf16 / PyTorch bf16 | ours bf16 / PyTorch f32 |")
print("|---|" + "---|" * (len(cfg) + 4))
for j in jobs:
    print(f"| {j} | " + " | ".join(f"{med[(j, c)]:,.0f}" if (j, c) in med else "-" for c in cfg) + " | " +
          " | ".join([r(j, "ours-bf16", "ours-f32"), r(j, "pt-bf16", "pt-f32"), r(j, "ours-bf16", "pt-bf16"), r(j, "ours-bf16", "pt-f32")]) + " |")
print("\nFinal test accuracy:\n\n| job | " + " | ".join(cfg) + " |\n|---|" + "---|" * len(cfg))
for j in jobs:
    print(f"| {j} | " + " | ".join(f"{acc[(j, c)]:.4f}" if (j, c) in acc else "-" for c in cfg) + " |")
PYEOF
