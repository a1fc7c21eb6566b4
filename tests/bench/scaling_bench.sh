#!/usr/bin/env bash
# scaling_bench.sh — issue 18 item 4: sync training over the multi-host test bed
# (tests/netbed/netbed.sh, docs/TESTBED.md) with W workers and S servers, each node in its own
# network namespace with a full-duplex link of RATE (tc tbf on its egress inside the namespace,
# and on the root-side end of its veth for its ingress), one Markdown row per cell: samples/s,
# bytes per step per worker and per server (in and out, from the veth counters: everything on
# the wire, framing included), the payload the job reports (worker 0's pushed / pulled per step),
# the server that carries the most bytes and the one that burns the most CPU, the busiest link's
# use of its cap, the CPU of all the job's processes (200% = both cores of this machine), and
# the window measured. With --ddp, also PyTorch DDP (gloo, one rank per worker namespace,
# GLOO_SOCKET_IFNAME=eth0) for the same worker counts, model, per-worker batch and caps.
#
# Jobs: mnist = deploy/jobs/mnist-mlp.json (784-700-500-10, 905,010 parameters, Adam); large =
# the suite's large MLP 784-4096-5000-10 (23,750,370 parameters, 95 MB). Weak scaling: each
# worker computes --batch-per-worker examples a step (default 64), so the global batch is W x 64.
# The job spec has no step cap: a cell trains on a dataset made for it of min(steps, 100) x W x 64
# examples of mnist10k (cyclic; scaling_bench.py data) for ceil(steps / 100) epochs, so every cell
# runs --steps steps (rounded up to whole epochs of 100); each epoch ends with an evaluation of
# 500 test examples, inside the window. The window measured: from the step past 20% of the
# steps to the last step before 95% (the first pull, the final evaluation and the model's
# collection left out).
#
# Default exchange of the workers (row-sparse replies, factored pushes, first layer's forward on
# the servers); --exchange dense for whole float32 chunks both ways.
#
# Usage: sudo tests/bench/scaling_bench.sh [--models "mnist large"] [--workers "1 2 4 8"]
#          [--servers "1 2 4"] [--rates "1gbit 10gbit"] [--steps N] [--batch-per-worker B]
#          [--ddp] [--no-pstrain] [--exchange default|dense] [--bed sc1] [--metrics-every N] [--keep]
#   --metrics-every: training.metrics_every_steps (default 1: a progress report per worker and
#   step, which the window needs for short runs; the spec's default is 10).
#   --steps: default 300 for mnist, 10 for large. Rates: tc rates (1gbit, 10gbit, 100mbit) or off.
# The figures also go, one JSON line per cell, to results.jsonl in the log directory (printed at
# the end; tests/bench/scaling_model.py fits the paper model to them).
# Needs root, ip, tc, PyTorch for --ddp (/usr/bin/python3). Env: PSTRAIN_DATA_DIR,
# PSTRAIN_BUILD_DIR (default <repo>/build), RESULTS (where results.jsonl is copied; default
# /tmp/scaling-results.jsonl). Logs in a temp dir (printed; removed unless --keep; each cell's
# checkpoints and backups are removed as soon as it ends).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MODELS="mnist" WORKERS="1 2 4 8" SERVERS="1 2 4" RATES="1gbit 10gbit" STEPS="" BATCH=64
DDP=0 PSTRAIN=1 EXCHANGE=default BED=sc1 KEEP=0 METRICS_EVERY=1
while (($#)); do
  case $1 in
    --models) MODELS=${2:?}; shift 2 ;;
    --workers) WORKERS=${2:?}; shift 2 ;;
    --servers) SERVERS=${2:?}; shift 2 ;;
    --rates) RATES=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --batch-per-worker) BATCH=${2:?}; shift 2 ;;
    --ddp) DDP=1; shift ;;
    --no-pstrain) PSTRAIN=0; shift ;;
    --exchange) EXCHANGE=${2:?}; shift 2 ;;
    --bed) BED=${2:?}; shift 2 ;;
    --metrics-every) METRICS_EVERY=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scaling_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
DATA=${PSTRAIN_DATA_DIR:-$ROOT/../shared/data}
BUILD=${PSTRAIN_BUILD_DIR:-$ROOT/build}
NETBED=$ROOT/tests/netbed/netbed.sh
PY=$ROOT/tests/bench/scaling_bench.py
[[ $(id -u) -eq 0 ]] || { echo "scaling_bench.sh: needs root (network namespaces)" >&2; exit 77; }
for b in coordinator/pstrain-coordinator server/pstrain-server worker/pstrain-worker; do
  [[ -x $BUILD/$b ]] || { echo "scaling_bench.sh: $BUILD/$b missing: build it" >&2; exit 1; }
done
WORK=$(mktemp -d /tmp/scaling-bench.XXXXXX)
echo "logs in $WORK" >&2
mkdir -p "$WORK/data"
for f in "$DATA"/*; do ln -s "$f" "$WORK/data/"; done

max_of() { local m=0 v; for v in "$@"; do ((v > m)) && m=$v; done; echo "$m"; }
MAXW=$(max_of $WORKERS) MAXS=$(max_of $SERVERS)
NODES=(c)
for ((i = 0; i < MAXS; i++)); do NODES+=("s$i"); done
for ((i = 0; i < MAXW; i++)); do NODES+=("w$i"); done

PIDS=()
stop_nodes() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  stop_nodes
  "$NETBED" -b "$BED" down || true
  [[ -s $WORK/results.jsonl ]] && cp "$WORK/results.jsonl" "${RESULTS:-/tmp/scaling-results.jsonl}" &&
    echo "figures (JSON lines) in ${RESULTS:-/tmp/scaling-results.jsonl}" >&2
  if ((KEEP)); then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
"$NETBED" -b "$BED" up "${NODES[@]}"
addr() { "$NETBED" -b "$BED" addr "$1"; }
in_ns() { local n=$1; shift; ip netns exec "psn-$BED-$n" "$@"; }
# spawn NODE CMD... &: the background job becomes CMD itself, so that $! is its pid.
spawn() { local n=$1; shift; exec ip netns exec "psn-$BED-$n" "$@"; }

# A full-duplex link of RATE per node: the node's egress (inside) and its ingress (the root-side
# end of its veth, whose egress is what the bridge delivers to the node). The burst: 2 ms of the
# rate, at least 64 KiB (a GSO packet), so that high rates are reached with the timer's granularity.
set_rate() {
  local node rate=$1 burst
  for node in "${NODES[@]}"; do
    if [[ $rate == off ]]; then
      "$NETBED" -b "$BED" rate "$node" off
      tc qdisc del dev "psn-$BED-$node" root 2>/dev/null || true
    else
      burst=$(/usr/bin/python3 -c "import re,sys; r=sys.argv[1]; m=re.fullmatch(r'([0-9.]+)([kmg]?)bit', r); \
v=float(m[1])*{'':1,'k':1e3,'m':1e6,'g':1e9}[m[2]]; print(max(65536, int(v/8*0.002)))" "$rate")
      in_ns "$node" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 1s
      tc qdisc replace dev "psn-$BED-$node" root tbf rate "$rate" burst "$burst" latency 1s
    fi
  done
}

steps_for() { [[ -n $STEPS ]] && echo "$STEPS" || { [[ $1 == large ]] && echo 10 || echo 300; }; }

run_pstrain() {  # model rate W S
  local model=$1 rate=$2 W=$3 S=$4 dir=$WORK/$1-$2-w$3-s$4 steps i
  mkdir -p "$dir"
  steps=$(steps_for "$model")
  local dataset
  local per_epoch=$((steps < 100 ? steps : 100))
  dataset=$(/usr/bin/python3 "$PY" data --out "$WORK/data" --shared "$DATA" --train $((per_epoch * W * BATCH)) --test 500)
  /usr/bin/python3 "$PY" spec --model "$model" --workers "$W" --servers "$S" --batch-per-worker "$BATCH" \
    --dataset "$dataset" --epochs $(((steps + per_epoch - 1) / per_epoch)) --metrics-every "$METRICS_EVERY" >"$dir/job.json"
  local c_addr
  c_addr=$(addr c)
  local timeouts=(--heartbeat-ms 1000 --dead-after-ms 60000)
  [[ $model == large ]] && timeouts=(--heartbeat-ms 2000 --dead-after-ms 120000 --server-call-timeout-ms 300000)
  spawn c "$BUILD/coordinator/pstrain-coordinator" --listen "$c_addr:19300" --http "$c_addr:19301" \
    --state-dir "$dir/state" --data-dir "$WORK/data" --datasets-dir "$dir/datasets" --job "$dir/job.json" \
    --exit-when-done "${timeouts[@]}" >"$dir/coordinator.log" 2>&1 &
  local coordinator=$!
  PIDS+=("$coordinator")
  local pids="c=$coordinator" links="psn-$BED-c"
  for ((i = 0; i < 100; i++)); do grep -q PSTRAIN_READY "$dir/coordinator.log" 2>/dev/null && break; sleep 0.1; done
  for ((i = 0; i < S; i++)); do
    spawn "s$i" "$BUILD/server/pstrain-server" --listen "$(addr "s$i"):19302" --advertise-host "$(addr "s$i")" \
      --coordinator "$c_addr:19300" --name "server-$i" --data-dir "$dir/server-$i" >"$dir/server-$i.log" 2>&1 &
    PIDS+=($!)
    pids+=",s$i=$!" links+=",psn-$BED-s$i"
  done
  local exchange=()
  [[ $EXCHANGE == dense ]] && exchange=(--exchange=dense)
  for ((i = 0; i < W; i++)); do
    spawn "w$i" "$BUILD/worker/pstrain-worker" --coordinator "$c_addr:19300" --name "worker-$i" --threads 1 \
      "${exchange[@]}" >"$dir/worker-$i.log" 2>&1 &
    PIDS+=($!)
    pids+=",w$i=$!" links+=",psn-$BED-w$i"
  done
  spawn c /usr/bin/python3 "$PY" poll --http "$c_addr:19301" --links "$links" --pids "$pids" --out "$dir/samples" \
    --timeout 900 &
  local poller=$!
  PIDS+=("$poller")
  wait "$poller" || true
  wait "$coordinator" || echo "scaling_bench.sh: $model $rate $W x $S: coordinator exit $?" >&2
  stop_nodes
  # The cell's state (checkpoints, backups: ~1 GB a cell for the large MLP) is not needed, even
  # with --keep: the logs and samples are.
  rm -rf "$dir/state" "$dir/datasets"
  for ((i = 0; i < S; i++)); do rm -rf "$dir/server-$i"; done
  /usr/bin/python3 "$PY" row --samples "$dir/samples" --model "$model" --rate "$rate" --workers "$W" --servers "$S" \
    --batch-per-worker "$BATCH" --json "$WORK/results.jsonl" || echo "| $model | $rate | $W | $S | failed: see $dir |"
}

run_ddp() {  # model rate W
  local model=$1 rate=$2 W=$3 dir=$WORK/ddp-$1-$2-w$3 steps i links=""
  mkdir -p "$dir"
  steps=$(steps_for "$model")
  /usr/bin/python3 "$PY" spec --model "$model" --workers "$W" --servers 1 --batch-per-worker "$BATCH" \
    --dataset mnist10k >"$dir/job.json"
  for ((i = 0; i < W; i++)); do links+="${links:+,}psn-$BED-w$i"; done
  : >"$dir/pids.tmp"
  local ranks=()
  for ((i = 0; i < W; i++)); do
    spawn "w$i" /usr/bin/python3 "$PY" ddp-rank --spec "$dir/job.json" --data-dir "$DATA" --rank "$i" --world "$W" \
      --master "$(addr w0)" --port 19310 --steps "$steps" --warmup 3 --links "$links" --pids-file "$dir/pids" \
      --out "$dir/result.json" >"$dir/rank-$i.log" 2>&1 &
    ranks+=($!)
    PIDS+=($!)
    echo "w$i=$!" >>"$dir/pids.tmp"
  done
  mv "$dir/pids.tmp" "$dir/pids"
  local ok=1
  for i in "${ranks[@]}"; do wait "$i" || ok=0; done
  PIDS=()
  if ((ok)) && [[ -s $dir/result.json ]]; then
    /usr/bin/python3 "$PY" ddp-row --result "$dir/result.json" --model "$model" --rate "$rate" --workers "$W" \
      --batch-per-worker "$BATCH" --json "$WORK/results.jsonl"
  else
    echo "| $model | $rate | $W | DDP | failed: see $dir |"
    tail -n 5 "$dir"/rank-*.log >&2
  fi
}

echo "| job | link | W | S | samples/s | wire B/step per worker out / in | payload pushed / pulled (w0) | wire B/step per server in / out (mean) | server with most bytes; busiest server CPU | busiest link use | CPU, all processes | coordinator B/step | window |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for model in $MODELS; do
  for rate in $RATES; do
    set_rate "$rate"
    for W in $WORKERS; do
      if ((PSTRAIN)); then
        for S in $SERVERS; do run_pstrain "$model" "$rate" "$W" "$S"; done
      fi
      ((DDP)) && run_ddp "$model" "$rate" "$W"
    done
  done
done
