#!/usr/bin/env bash
# suite.sh — the benchmark suite (issue 20): every reference job, ours and PyTorch's, in one run on
# one machine, with the method of engine_bench.sh and cluster_bench.sh; prints a Markdown table.
#
# Jobs (tests/bench/suite_jobs.py; --jobs REGEX picks by id):
#   mnist-mlp    deploy/jobs/mnist-mlp.json: MLP 784-700-500-10, Adam, batch 128, mnist10k
#   fashion-mlp  the same net and optimizer on fashion (60,000 train examples)
#   fashion-cnn  deploy/jobs/fashion-cnn.json: conv32-pool-conv64-pool-d64-d10, Adam, batch 64
#   keras-cnn    deploy/jobs/keras-multiworker-cnn.json: conv32-d128-d10, SGD 0.001, batch 128, fashion-mnist
#   tabular-mlp  64 float32 features, 256-256 hidden, 10 classes, Adam, batch 128; synthetic data
#                written by suite_jobs.py with a fixed seed as a dataset directory (tabular64/)
#   large-mlp    MLP 784-4096-5000-10 (23.8M parameters), Adam, batch 128, mnist10k
#   fashion-resnet  deploy/jobs/fashion-mnist-resnet.json: the residual CNN of issue 35 (flip and
#                crop, batch_norm, residual adds, global average pooling, dropout), AdamW on a
#                cosine schedule, batch 128, fashion-mnist
#   text-transformer, text-lstm  sequence models on seq-ids200 (200 token ids, padded)
#   Only when --jobs names them (its pattern holds "causal" or "tpu"): text-causal (text-transformer
#   with use_causal_mask) and tpu-cnn.
# Configs per job, run in this order once per repeat, repeats interleaved (r1 of every config of a
# job, then r2, ...; ours and PyTorch's alternate within a repeat):
#   ours-t1 / ours-t2   pstrain-train --threads 1 / 2 --parallelism batch
#   pt-t1 / pt-t2       tests/bench/pt_job.py --threads 1 / 2 (PyTorch + OpenBLAS, the same spec and files)
#   sync-2x2 / async-2x2  deploy/local-cluster.sh run: 2 workers x 2 servers, 1 compute thread per worker
#   pt-ddp              pt_job.py --ddp 2 --threads 1 (DistributedDataParallel, gloo, loopback)
# samples/s of a run = median of its per-epoch figures without epoch 1 (warm-up); the table shows
# the median over repeats, the ratios sync/ours-1-thread, sync/DDP, ours/PyTorch at 1 and 2 threads,
# and the final test accuracy of each config; a second table the achieved GFLOPS (3 x the model's
# forward FLOPs per example x samples/s: pstrain-train --flops) and their fraction of the cores'
# float32 peak (cores used x cpu MHz x FLOPs per cycle of the level: 64 AVX-512, 32 AVX2 + FMA, 8 SSE).
#
# Setup once (root): tests/bench/setup-pytorch.sh. Binaries: an existing build in $PSTRAIN_BUILD_DIR
# (pstrain-train, -coordinator, -server, -worker, pstrain).
# Usage: tests/bench/suite.sh [--repeats N] [--epochs E] [--limit N] [--jobs REGEX] [--quick]
#                             [--level LEVEL] [--standalone] [--precision P]
#   --repeats N   runs per config (default 3)
#   --epochs E    epochs per run for every job (default: each job's own, 3 or 5; 2 at least to time
#                 anything after the warm-up epoch)
#   --limit N     train on the first N examples of each dataset (test on N/2): a subset dataset
#                 directory that every implementation reads
#   --jobs REGEX  only the jobs whose id matches (e.g. 'mlp', '^fashion-cnn$')
#   --quick       smoke run: 1 repeat, 2 epochs, --limit 3000 (figures not for comparison)
#   --port-base P ports P..P+99 for the clusters' RPC/HTTP and DDP's rendezvous (default 19500)
#   --level L     run ours and PyTorch as a CPU of level L runs them (tests/bench/levels.sh: native,
#                 x86-64-v4, x86-64-v3, x86-64: our kernels, both sides' OpenBLAS and oneDNN, and
#                 PyTorch's own kernels capped there); the table's header names the CPU, its flags and
#                 what pstrain computes with. A portable build is PSTRAIN_BUILD_DIR=build-portable.
#   --standalone  only the standalone configs (ours-t1, pt-t1, ours-t2, pt-t2)
#   --precision P float32 (default) or mixed_bfloat16: written into every job's spec, so both sides
#                 run it (ours: bfloat16 convolutions where the CPU has them, else float32 with a
#                 log line; PyTorch: CPU autocast to bfloat16). The fraction-of-peak table still
#                 divides by the float32 peak.
# Env: PSTRAIN_DATA_DIR (default <repo>/../shared/data), PSTRAIN_BUILD_DIR (default <repo>/build; inside
#      the repository), PYTORCH_BENCH_DIR (default /work/shared/bench/pytorch: openblas_env.sh).
#      Logs of every run, the generated data and specs are kept in a temp dir. keras-cnn reads the
#      official Fashion-MNIST from Debian's dataset-fashion-mnist (deploy/setup.sh installs it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/bench
CMDLINE="$(printf '%q ' "$0" "$@")"
REPEATS=3 EPOCHS=0 LIMIT=0 JOBS='' QUICK=0 PORT_BASE=19500 LEVEL=native STANDALONE=0 PRECISION=float32
while (($#)); do
  case $1 in
    --repeats) REPEATS=${2:?--repeats needs a value}; shift 2 ;;
    --epochs) EPOCHS=${2:?--epochs needs a value}; shift 2 ;;
    --limit) LIMIT=${2:?--limit needs a value}; shift 2 ;;
    --jobs) JOBS=${2?--jobs needs a value}; shift 2 ;;
    --port-base) PORT_BASE=${2:?--port-base needs a value}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --level) LEVEL=${2:?--level needs a value}; shift 2 ;;
    --standalone) STANDALONE=1; shift ;;
    --precision) PRECISION=${2:?--precision needs a value}; shift 2 ;;
    -h|--help) sed -n '2,52p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "suite.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((QUICK)) && { REPEATS=1; EPOCHS=2; LIMIT=3000; }
[[ $PRECISION == float32 || $PRECISION == mixed_bfloat16 ]] ||
  { echo "suite.sh: --precision must be float32 or mixed_bfloat16" >&2; exit 2; }
[[ $REPEATS =~ ^[1-9][0-9]*$ && $EPOCHS =~ ^[0-9]+$ && $LIMIT =~ ^[0-9]+$ && $PORT_BASE =~ ^[1-9][0-9]*$ ]] ||
  { echo "suite.sh: --repeats must be a positive integer, --epochs/--limit/--port-base integers" >&2; exit 2; }

# shellcheck source=tests/bench/levels.sh
. "$HERE/levels.sh"
bench_level "$LEVEL" || exit 2
PY=/usr/bin/python3
DATA=${PSTRAIN_DATA_DIR:-$ROOT/../shared/data}
BUILD=$(cd "${PSTRAIN_BUILD_DIR:-$ROOT/build}" 2>/dev/null && pwd) || { echo "suite.sh: build dir not found" >&2; exit 1; }
TRAIN=$BUILD/worker/pstrain-train
PT_DIR=${PYTORCH_BENCH_DIR:-/work/shared/bench/pytorch}
die() { echo "suite.sh: $*" >&2; exit 1; }
for b in "$TRAIN" "$BUILD/server/pstrain-server" "$BUILD/coordinator/pstrain-coordinator" "$BUILD/worker/pstrain-worker" "$BUILD/cli/pstrain"; do
  [[ -x $b ]] || die "$b not found: build the project first"
done
[[ $BUILD == "$ROOT"/* ]] || die "PSTRAIN_BUILD_DIR must be inside $ROOT (deploy/local-cluster.sh takes it relative)"
[[ -d $DATA ]] || die "data dir $DATA not found (set PSTRAIN_DATA_DIR)"
DATA=$(cd "$DATA" && pwd)
[[ -f $PT_DIR/openblas_env.sh ]] || die "$PT_DIR/openblas_env.sh not found (PYTORCH_BENCH_DIR)"
[[ -x $PY ]] || die "$PY not found"

# PyTorch runs get OpenBLAS from /opt via openblas_env.sh; ours keeps its own environment.
# shellcheck disable=SC1091
pt() { (. "$PT_DIR/openblas_env.sh" && "$PY" "$@"); }
PT_BLAS=$(pt -c 'import torch; a = torch.randn(64, 64); a @ a
print(" ".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libopenblas" in l or "libblas" in l})))' 2>/dev/null) ||
  die "PyTorch is not installed for $PY: run (as root) $ROOT/tests/bench/setup-pytorch.sh"
[[ $PT_BLAS == *anchors-openblas* ]] || die "PyTorch does not load /opt/anchors-openblas (got: ${PT_BLAS:-none}): run tests/bench/setup-pytorch.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench_suite.XXXXXX")
RESULTS=$WORK/results.tsv
: >"$RESULTS"
JOBLIST=$(pt "$HERE/suite_jobs.py" prepare --work "$WORK" --data "$DATA" --jobs "$JOBS" --epochs "$EPOCHS" --limit "$LIMIT") ||
  die "could not prepare the jobs' data and specs (see above)"
SUITE_DATA=$WORK/data  # the shared data's files (symlinks) plus the generated dataset directories
if [[ $PRECISION != float32 ]]; then  # every spec (standalone, sync, async) in the asked precision
  "$PY" - "$PRECISION" "$WORK"/specs/*.json <<'PYEOF' || die "could not set the specs' precision"
import json, sys
for path in sys.argv[2:]:
    spec = json.load(open(path))
    spec["precision"] = sys.argv[1]
    json.dump(spec, open(path, "w"), indent=1)
PYEOF
fi
# Each job's forward FLOPs per example (pstrain-train --flops: its matrix products), for the table
# of achieved GFLOPS and fraction of peak.
FLOPS=$WORK/flops.tsv
while IFS=$'\t' read -r job _ _; do
  printf '%s\t%s\n' "$job" "$("$TRAIN" --spec "$WORK/specs/$job.json" --flops | awk '{print $2}')" >>"$FLOPS"
done <<<"$JOBLIST"

# Ports: the clusters' RPC and HTTP and DDP's rendezvous take the next pair of PORT_BASE..+99 on
# every run (a port just closed may linger in TIME_WAIT).
PORT_I=0
next_ports() { P1=$((PORT_BASE + PORT_I)); P2=$((P1 + 1)); PORT_I=$(((PORT_I + 2) % 100)); }

FAILED=()
# run JOB LABEL CONFIG REP CMD...: run once, log, append "job label config rep sps acc timed secs"
run() {
  local job=$1 label=$2 config=$3 rep=$4; shift 4
  local log=$WORK/$job-$config-r$rep.log t0=$SECONDS
  # A failed or unparsable run is reported and left out of the table; the suite goes on.
  if ! "$@" >"$log" 2>&1; then
    tail -n 20 "$log" >&2; echo "suite.sh: $job $config run $rep FAILED (log: $log)" >&2
    FAILED+=("$job $config r$rep ($log)"); return 0
  fi
  local res sps acc n
  res=$("$PY" "$HERE/suite_jobs.py" parse "$log") || { FAILED+=("$job $config r$rep: cannot parse $log"); return 0; }
  read -r sps acc n <<<"$res"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$job" "$label" "$config" "$rep" "$sps" "$acc" "$n" "$((SECONDS - t0))" >>"$RESULTS"
  printf '  %-12s %-9s run %s: %9s samples/s, acc %s (%ss, load avg %s)\n' "$job" "$config" "$rep" "$sps" "$acc" \
    "$((SECONDS - t0))" "$(cut -d' ' -f1 /proc/loadavg)" >&2
}

cluster() {  # JOB MODE REP
  next_ports
  LOCAL_CLUSTER_DIR=$WORK/cluster-$1-$2-r$3 RPC_PORT=$P1 HTTP_PORT=$P2 SERVERS=2 WORKERS=2 WORKER_THREADS=1 WORKER_FLAGS='' \
    BUILD_DIR=${BUILD#"$ROOT"/} PSTRAIN_DATA_DIR=$SUITE_DATA \
    timeout -k 10 1800 "$ROOT/deploy/local-cluster.sh" run "$WORK/specs/$1-$2.json"
}
ddp() {  # JOB
  next_ports
  pt "$HERE/pt_job.py" --spec "$WORK/specs/$1.json" --data-dir "$SUITE_DATA" --ddp 2 --threads 1 --port "$P1"
}

CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
echo "command: $CMDLINE"
bench_machine "$TRAIN"
echo "machine: nproc=$(nproc), CPU: ${CPU:-unknown}, $(awk '/MemTotal/ {printf "%.1f GB RAM", $2 / 1048576}' /proc/meminfo), kernel $(uname -r), load avg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pstrain: $BUILD (git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', tree dirty'); pstrain-train built $(date -r "$TRAIN" '+%F %T'), pstrain-worker $(date -r "$BUILD/worker/pstrain-worker" '+%F %T'))"
echo "pytorch: $(pt -c 'import torch; print(torch.__version__)' 2>/dev/null), BLAS $PT_BLAS"
echo "precision: $PRECISION"
echo "repeats $REPEATS; epochs $( ((EPOCHS)) && echo "$EPOCHS" || echo "each job's own"); $( ((LIMIT)) && echo "first $LIMIT train examples" || echo "whole datasets")$( ((QUICK)) && echo ' (--quick)')"
echo "data: $DATA (+ generated: $SUITE_DATA)"
echo "cluster transport: $([[ ${PSTRAIN_SERVER_SAME_HOST_SOCKET:-1} =~ ^(0|false|no)$ ]] && echo 'loopback TCP (PSTRAIN_SERVER_SAME_HOST_SOCKET=0)' || echo 'same-host sockets (the default; PSTRAIN_SERVER_SAME_HOST_SOCKET=0 for loopback TCP)')"
env | grep -E '^(OPENBLAS_|OMP_|GOTO|MKL_|PSTRAIN_CPU|PSTRAIN_SERVER_|ATEN_|ONEDNN_|DNNL_)' | sed 's/^/env: /' || true
echo "logs: $WORK"
echo

START=$SECONDS
while IFS=$'\t' read -r job label epochs; do
  echo "$job ($epochs epochs) ..." >&2
  spec=$WORK/specs/$job.json
  for ((rep = 1; rep <= REPEATS; rep++)); do
    run "$job" "$label" ours-t1 $rep "$TRAIN" --spec "$spec" --data-dir "$SUITE_DATA" --threads 1 --parallelism batch
    run "$job" "$label" pt-t1 $rep pt "$HERE/pt_job.py" --spec "$spec" --data-dir "$SUITE_DATA" --threads 1
    run "$job" "$label" ours-t2 $rep "$TRAIN" --spec "$spec" --data-dir "$SUITE_DATA" --threads 2 --parallelism batch
    run "$job" "$label" pt-t2 $rep pt "$HERE/pt_job.py" --spec "$spec" --data-dir "$SUITE_DATA" --threads 2
    ((STANDALONE)) && continue
    run "$job" "$label" sync-2x2 $rep cluster "$job" sync $rep
    run "$job" "$label" pt-ddp $rep ddp "$job"
    run "$job" "$label" async-2x2 $rep cluster "$job" async $rep
  done
done <<<"$JOBLIST"
echo >&2

[[ -s $RESULTS ]] && "$PY" "$HERE/suite_jobs.py" table "$RESULTS" "$REPEATS" "$FLOPS" "${PSTRAIN_CPU_TARGET:-native}"
echo
echo "total wall time: $((SECONDS - START)) s; load avg at end: $(cut -d' ' -f1-3 /proc/loadavg)"
if ((${#FAILED[@]})); then
  echo; echo "FAILED runs (left out of the table):"; printf -- '- %s\n' "${FAILED[@]}"
  exit 1
fi
