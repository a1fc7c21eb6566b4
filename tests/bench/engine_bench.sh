#!/usr/bin/env bash
# engine_bench.sh — standalone trainer (pstrain-train) vs PyTorch 1.13 + OpenBLAS on the reference
# jobs, in one run on one machine. For each cell (MLP / CNN x 1 / 2 threads) it runs ours and
# PyTorch interleaved (ours, theirs, ours, theirs, ...) --repeats times — at 2 threads ours runs in
# both --parallelism modes (batch, blas) — then prints a markdown table of median samples/s, the
# ratio ours/PyTorch and median final test accuracy.
#
# Setup once (root): tests/bench/setup-pytorch.sh.  Binaries: an existing build in $PSTRAIN_BUILD_DIR.
# Usage: tests/bench/engine_bench.sh [--repeats N] [--quick] [--mlp-epochs N] [--level LEVEL]
#   --repeats N     runs per implementation and cell (default 3)
#   --mlp-epochs N  MLP epochs for both sides (default 3, as deploy/jobs/mnist-mlp.json)
#   --quick         smoke run: MLP 1 epoch, CNN only the first 150 steps (9,600 samples) of its epoch;
#                   its samples/s include warm-up and are not for comparison
#   --level L       run both sides as a CPU of level L does (tests/bench/levels.sh: native, x86-64-v4,
#                   x86-64-v3, x86-64); PSTRAIN_BUILD_DIR=build-portable for a portable build
# Env: PSTRAIN_DATA_DIR (default <repo>/../shared/data), PSTRAIN_BUILD_DIR (default <repo>/build),
#      PYTORCH_BENCH_DIR (default /work/shared/bench/pytorch). Logs of every run are kept in a temp dir.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CMDLINE="$(printf '%q ' "$0" "$@")"
REPEATS=3 MLP_EPOCHS=3 QUICK=0 LEVEL=native
while (($#)); do
  case $1 in
    --repeats) REPEATS=${2:?--repeats needs a value}; shift 2 ;;
    --mlp-epochs) MLP_EPOCHS=${2:?--mlp-epochs needs a value}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --level) LEVEL=${2:?--level needs a value}; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "engine_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $REPEATS =~ ^[1-9][0-9]*$ && $MLP_EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "engine_bench.sh: --repeats/--mlp-epochs must be positive integers" >&2; exit 2; }
((QUICK)) && MLP_EPOCHS=1
CNN_STEPS=-1; ((QUICK)) && CNN_STEPS=150

# shellcheck source=tests/bench/levels.sh
. "$ROOT/tests/bench/levels.sh"
bench_level "$LEVEL" || exit 2
PY=/usr/bin/python3
DATA=${PSTRAIN_DATA_DIR:-$ROOT/../shared/data}
TRAIN=${PSTRAIN_BUILD_DIR:-$ROOT/build}/worker/pstrain-train
PT_DIR=${PYTORCH_BENCH_DIR:-/work/shared/bench/pytorch}
die() { echo "engine_bench.sh: $*" >&2; exit 1; }
[[ -x $TRAIN ]] || die "$TRAIN not found: build the project first"
[[ -d $DATA ]] || die "data dir $DATA not found (set PSTRAIN_DATA_DIR)"
[[ -f $PT_DIR/mlp.py && -f $PT_DIR/openblas_env.sh ]] || die "PyTorch baselines not found in $PT_DIR"
[[ -x $PY ]] || die "$PY not found"

# PyTorch runs get OpenBLAS from /opt via openblas_env.sh; ours keeps its own environment.
# shellcheck disable=SC1091
pt() { (. "$PT_DIR/openblas_env.sh" && cd "$PT_DIR" && ANCHOR_DATA=$DATA "$PY" "$@"); }
PT_BLAS=$(pt -c 'import torch; a = torch.randn(64, 64); a @ a
print(" ".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libopenblas" in l or "libblas" in l})))' 2>/dev/null) ||
  die "PyTorch is not installed for $PY: run (as root) $ROOT/tests/bench/setup-pytorch.sh"
[[ $PT_BLAS == *anchors-openblas* ]] || die "PyTorch does not load /opt/anchors-openblas (got: ${PT_BLAS:-none}): run tests/bench/setup-pytorch.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/engine_bench.XXXXXX")
RESULTS=$WORK/results.tsv
# Our MLP spec with the chosen epoch count (PyTorch's mlp.py gets the same --epochs).
"$PY" -c 'import json, sys; s = json.load(open(sys.argv[1])); s["training"]["epochs"] = int(sys.argv[3]); json.dump(s, open(sys.argv[2], "w"))' \
  "$ROOT/deploy/jobs/mnist-mlp.json" "$WORK/mnist-mlp.json" "$MLP_EPOCHS"
CNN_SPEC=$ROOT/deploy/jobs/fashion-cnn.json
CNN_EPOCHS=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["training"]["epochs"])' "$CNN_SPEC")

# result_of IMPL LOG -> "samples_per_s final_test_accuracy" from the log's last RESULT line
result_of() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
impl, log = sys.argv[1], sys.argv[2]
lines = [l for l in open(log) if l.startswith("RESULT ")]
if not lines: sys.exit(f"no RESULT line in {log}")
r = json.loads(lines[-1][len("RESULT "):])
if impl == "pstrain":
    sps, acc = r["samples_per_second"], r["final_test_accuracy"]
elif r["bench"] == "cnn":
    sps, acc = r["samples_per_s"]["median"], r["test_acc_by_run"][0][-1]
else:
    sps, acc = r["samples_per_s_per_run"]["median"], r["test_acc_by_epoch"][-1][0]
print(f"{sps:.1f} {acc:.4f}")
EOF
}

# run JOB THREADS IMPL MODE REP CMD... : run once, log, append a row to results.tsv
run() {
  local job=$1 threads=$2 impl=$3 mode=$4 rep=$5; shift 5
  local log=$WORK/$job-t$threads-$impl-$mode-r$rep.log t0=$SECONDS
  "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$impl $job failed (log: $log)"; }
  local res sps acc; res=$(result_of "$impl" "$log") || die "cannot parse $log"; read -r sps acc <<<"$res"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$job" "$threads" "$impl" "$mode" "$rep" "$sps" "$acc" "$((SECONDS - t0))" >>"$RESULTS"
  printf '  %-4s t=%s %-7s %-5s run %s: %s samples/s, acc %s (%ss)\n' "$job" "$threads" "$impl" "$mode" "$rep" "$sps" "$acc" "$((SECONDS - t0))" >&2
}

CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
echo "command: $CMDLINE"
bench_machine "$TRAIN"
echo "machine: nproc=$(nproc), CPU: ${CPU:-unknown}, load avg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pstrain: $TRAIN (git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', tree dirty'); binary built $(date -r "$TRAIN" '+%F %T'))"
echo "pytorch: $(pt -c 'import torch; print(torch.__version__)' 2>/dev/null), BLAS $PT_BLAS"
echo "data: $DATA; MLP epochs $MLP_EPOCHS; CNN epochs $CNN_EPOCHS$( ((QUICK)) && echo ", first $CNN_STEPS steps only (--quick)"); repeats $REPEATS"
env | grep -E '^(OPENBLAS_|OMP_|GOTO|MKL_)' | sed 's/^/env: /' || true
echo "logs: $WORK"
echo

START=$SECONDS
for job in mlp cnn; do
  for threads in 1 2; do
    modes=(batch); ((threads > 1)) && modes=(batch blas)
    for ((rep = 1; rep <= REPEATS; rep++)); do
      for mode in "${modes[@]}"; do
        if [[ $job == mlp ]]; then
          run $job $threads pstrain "$mode" $rep "$TRAIN" --spec "$WORK/mnist-mlp.json" --data-dir "$DATA" --threads $threads --parallelism "$mode"
        else
          run $job $threads pstrain "$mode" $rep "$TRAIN" --spec "$CNN_SPEC" --data-dir "$DATA" --threads $threads --parallelism "$mode" --max-steps $CNN_STEPS
        fi
      done
      if [[ $job == mlp ]]; then
        run $job $threads pytorch na $rep pt mlp.py --threads $threads --epochs "$MLP_EPOCHS" --repeats 1
      else
        limit=0; ((CNN_STEPS > 0)) && limit=$((CNN_STEPS * 64))
        run $job $threads pytorch na $rep pt cnn.py --threads $threads --epochs "$CNN_EPOCHS" --repeats 1 --limit $limit
      fi
    done
  done
done
echo >&2

"$PY" - "$RESULTS" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    job, threads, impl, mode, rep, sps, acc, secs = line.rstrip("\n").split("\t")
    rows[(job, int(threads), impl, mode)].append((float(sps), float(acc)))
med = lambda xs, i: statistics.median(x[i] for x in xs)
name = {"mlp": "MLP 784-700-500-10", "cnn": "Fashion CNN"}
print("| job | threads | pstrain mode | pstrain samples/s | PyTorch samples/s | ratio | pstrain test acc | PyTorch test acc |")
print("|---|---|---|---|---|---|---|---|")
for (job, threads, impl, mode), ours in rows.items():
    if impl != "pstrain": continue
    theirs = rows[(job, threads, "pytorch", "na")]
    o, t = med(ours, 0), med(theirs, 0)
    print(f"| {name[job]} | {threads} | {mode} | {o:,.0f} | {t:,.0f} | {o / t:.2f} | {med(ours, 1):.4f} | {med(theirs, 1):.4f} |")
n = len(next(iter(rows.values())))
print(f"\nMedians of {n} run(s) each; ratio = pstrain / PyTorch samples/s; test acc = final test accuracy.")
EOF
echo "total wall time: $((SECONDS - START)) s; load avg at end: $(cut -d' ' -f1-3 /proc/loadavg)"
