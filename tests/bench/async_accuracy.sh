#!/usr/bin/env bash
# async_accuracy.sh — issue 19's measurement: test accuracy after the same epochs of one job run
# several ways: one process (pstrain-train), a sync cluster, and async clusters with each
# training.async_lr (WORKERS workers, SERVERS servers).
#
# Usage: tests/bench/async_accuracy.sh JOB [EPOCHS]
#   JOB  fashion-momentum  Fashion-MNIST (60k), MLP 784-700-500-10, SGD lr LR (0.05) momentum 0.9,
#                          batch 128 (the issue's failing case)
#        fashion-sgd       the same without momentum (set LR: 0.1 trains in sync)
#        mnist-adam        mnist10k, the same MLP with Adam lr 0.001, batch 128
#                          (deploy/jobs/mnist-mlp.json)
#   EPOCHS (3)
# Env: WORKERS (3), SERVERS (2), LR (the Fashion jobs' rate), SEED (22: the data's shuffle seed),
# RUNS ("trainer sync constant staleness batch_staleness"): each is "trainer" (one process),
# "trainer-worker-batch" (one process at one async worker's batch, 128 / WORKERS, same rate),
# "sync", or an async_lr value (an async cluster); BUILD_DIR (build), PSTRAIN_DATA_DIR,
# PORT_BASE (19100: the clusters' REST and RPC ports are PORT_BASE + 0, 1, 2, ...).
# Prints one line per run: "JOB RUN accuracy A train-loss L staleness S seconds T" (A the final
# test accuracy, L the last epoch's training loss, S the servers' mean staleness of the async
# pushes), and the epochs' lines above it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
job=${1:?usage: $0 fashion-momentum|mnist-adam [EPOCHS]}
epochs=${2:-3}
workers=${WORKERS:-3} servers=${SERVERS:-2} lr=${LR:-0.05} runs=${RUNS:-trainer sync constant staleness batch_staleness}
port=${PORT_BASE:-19100} seed=${SEED:-22}
source "$repo/deploy/data-dir.sh"
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build="$repo/$build" ;; esac
work=$(mktemp -d /tmp/pstrain-async-accuracy.XXXXXX)
echo "async_accuracy: logs in $work" >&2

spec() {  # spec MODE ASYNC_LR OUT [GLOBAL_BATCH]
  python3 - "$job" "$epochs" "$workers" "$servers" "$lr" "$1" "$2" "$3" "${4:-128}" "$seed" <<'PY'
import json, sys
job, epochs, workers, servers, lr, mode, async_lr, out, batch, seed = sys.argv[1:]
mlp = [{"type": "flatten"}, {"type": "dense", "units": 700, "activation": "relu"},
       {"type": "dense", "units": 500, "activation": "relu"}, {"type": "dense", "units": 10}]
if job == "fashion-momentum":
    dataset, optimizer = "fashion", {"type": "sgd", "learning_rate": float(lr), "momentum": 0.9}
elif job == "fashion-sgd":
    dataset, optimizer = "fashion", {"type": "sgd", "learning_rate": float(lr)}
elif job == "mnist-adam":
    dataset, optimizer = "mnist10k", {"type": "adam", "learning_rate": 0.001, "epsilon": 1e-7}
else:
    sys.exit("unknown job " + job)
training = {"mode": mode, "global_batch_size": int(batch), "epochs": int(epochs), "workers": int(workers),
            "servers": int(servers)}
if mode == "async":
    training["async_lr"] = async_lr
s = {"name": job + "-" + (async_lr if mode == "async" else mode),
     "dataset": {"name": dataset, "shard_policy": "DATA", "shuffle_seed": int(seed)},
     "model": {"input_shape": [28, 28, 1], "seed": 22, "layers": mlp},
     "loss": "sparse_softmax_cross_entropy", "optimizer": optimizer, "training": training}
json.dump(s, open(out, "w"))
PY
}

for run in $runs; do
  start=$(date +%s)
  case $run in
    trainer)
      spec sync - "$work/$run.json"
      "$build/worker/pstrain-train" --spec "$work/$run.json" --data-dir "$PSTRAIN_DATA_DIR" > "$work/$run.log" 2>&1 || true
      ;;
    trainer-worker-batch)  # one process at one async worker's batch (global batch / WORKERS), same rate
      spec sync - "$work/$run.json" $(( (128 + workers - 1) / workers ))
      "$build/worker/pstrain-train" --spec "$work/$run.json" --data-dir "$PSTRAIN_DATA_DIR" > "$work/$run.log" 2>&1 || true
      ;;
    sync)
      spec sync - "$work/$run.json"
      ;;
    *)  # an async_lr value
      spec async "$run" "$work/$run.json"
      ;;
  esac
  if [ "${run#trainer}" = "$run" ]; then
    LOCAL_CLUSTER_DIR=$work/cluster-$run RPC_PORT=$port HTTP_PORT=$((port + 1)) WORKERS=$workers SERVERS=$servers \
      BUILD_DIR=$build BUILD=0 AUTH=0 "$repo/deploy/local-cluster.sh" run "$work/$run.json" > "$work/$run.log" 2>&1 || true
    port=$((port + 2))
  fi
  grep -E '^epoch [0-9]+:|divergence warning' "$work/$run.log" | sed "s/^/  $run: /" || true
  accuracy=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$work/$run.log" | tail -1)
  loss=$(sed -n 's/^epoch [0-9]*: train loss \([0-9.naif]*\).*/\1/p' "$work/$run.log" | tail -1)
  # async: the servers' mean staleness (pushes applied to a chunk between a push's base and it)
  staleness=$(cat "$work/cluster-$run"/server-*.log 2>/dev/null |
    sed -n 's/.*async staleness mean \([0-9.e+-]*\) max.*/\1/p' | awk '{s += $1; n++} END {if (n) printf "%.2f", s / n}' || true)
  echo "$job $run accuracy ${accuracy:-none} train-loss ${loss:-none} staleness ${staleness:--} seconds $(( $(date +%s) - start ))"
done
