#!/usr/bin/env bash
# store_read_bench.sh — workers reading their examples from the dataset store against reading
# them through the coordinator (issue 50, "Reading keeps up"), interleaved: coordinator, store,
# coordinator, store, ... Each run is `deploy/local-cluster.sh run SPEC` with 2 workers x 2
# servers, 1 compute thread per worker, the workers started with `--data-from coordinator` (A) or
# `--data-from store` (B); samples/s is the median of the run's per-epoch figures without epoch 1
# (tests/bench/suite_jobs.py parse). With --cold, the page cache is dropped before every run
# (echo 3 > /proc/sys/vm/drop_caches: root only), so B's first reads come from the disk.
#
# The datasets: Fashion-MNIST and MNIST (10k) uploaded once as IDX pairs to a cluster of this
# build, which stores them as shards (fashion-store, mnist-store); the jobs are
# deploy/jobs/fashion-mnist-cnn.json and mnist-mlp.json on them, EPOCHS epochs each.
#
# The order alternates (A B, B A, A B, ...) so that neither side always runs first: a pair's
# ratio then averages out whatever drifts between the two runs (the host's load, the page cache).
#
# --trainer: the same datasets read by the standalone trainer (pstrain-train, the cluster's data
# path in one process, 2 threads), A: the built-in dataset loaded in memory from the IDX files,
# B: its shards, read from the disk by example id; no cluster and no network, so the difference
# is reading alone. The same examples in the same order: the test accuracies must be equal.
#
# Usage: tests/bench/store_read_bench.sh [--repeats N (3)] [--epochs E (3)] [--cold] [--trainer] [--build DIR (build)]
# Env: PSTRAIN_DATA_DIR (the IDX files: ../shared/data or ./data), PORT_BASE (default 19900).
# Prints `lscpu`'s model and flags, every run, then per job the medians and B / A.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeats=3 epochs=3 cold=0 build=build trainer=0
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --cold) cold=1; shift ;;
    --trainer) trainer=1; shift ;;
    --build) build=$2; shift 2 ;;
    *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
data=${PSTRAIN_DATA_DIR:-}
[ -n "$data" ] || for d in "$ROOT/../shared/data" "$ROOT/data"; do [ -f "$d/fashion-train-images-idx3-ubyte.gz" ] && data=$d && break; done
[ -f "$data/fashion-train-images-idx3-ubyte.gz" ] || { echo "store_read_bench: no Fashion-MNIST IDX files (PSTRAIN_DATA_DIR)" >&2; exit 1; }
port=${PORT_BASE:-19900}
work=$(mktemp -d /tmp/store-read-bench.XXXXXX)
echo "store_read_bench: logs in $work"
lscpu | grep -E '^Model name' ; lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E 'avx2|avx512f$|avx512_bf16|sse4_2' | tr '\n' ' '; echo

# The datasets, uploaded once: the cluster's datasets directory becomes the runs' data directory.
prep=$work/prep
export AUTH=0 PSTRAIN_CLUSTER_SECRET_FILE=none
LOCAL_CLUSTER_DIR=$prep RPC_PORT=$port HTTP_PORT=$((port + 1)) BUILD_DIR=$build PSTRAIN_DATA_DIR=$data \
  "$ROOT/deploy/local-cluster.sh" up >"$work/prep.log" 2>&1
upload() {  # dataset split part file
  curl -sf -o /dev/null -H 'Content-Type: application/gzip' -T "$data/$4" "http://127.0.0.1:$((port + 1))/v1/datasets/$1/$2/$3"
}
for name in fashion mnist10k; do
  store=${name%10k}-store
  for split in train test; do
    upload "$store" "$split" images "$name-$split-images-idx3-ubyte.gz"
    upload "$store" "$split" labels "$name-$split-labels-idx1-ubyte.gz"
  done
done
LOCAL_CLUSTER_DIR=$prep "$ROOT/deploy/local-cluster.sh" down >>"$work/prep.log" 2>&1
runs_data=$prep/datasets
ls "$runs_data"

spec() {  # job-file dataset -> a spec path
  /usr/bin/python3 - "$ROOT/deploy/jobs/$1" "$2" "$epochs" "$work/$2.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["dataset"]["name"] = sys.argv[2]
spec["training"].update({"epochs": int(sys.argv[3]), "workers": 2, "servers": 2, "mode": "sync"})
spec["training"].pop("validation_fraction", None)
json.dump(spec, open(sys.argv[4], "w"))
PY
  echo "$work/$2.json"
}

sides() { [ $(($1 % 2)) = 1 ] && echo "A B" || echo "B A"; }  # rep -> the order of its two runs

summary() {  # dataset "A rates" "B rates" "A label" "B label"
  /usr/bin/python3 - "$@" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[2].split()]
b = [float(x) for x in sys.argv[3].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"{sys.argv[1]}: median {sys.argv[4]} {ma:,.0f}, {sys.argv[5]} {mb:,.0f} samples/s; {sys.argv[5]} / {sys.argv[4]} = {mb / ma:.3f} "
      "(per pair: " + ", ".join(f"{y / x:.3f}" for x, y in zip(a, b)) + ")")
PY
}

if [ "$trainer" = 1 ]; then
  for job in "fashion-mnist-cnn.json fashion" "mnist-mlp.json mnist10k"; do
    read -r file builtin <<<"$job"
    store=${builtin%10k}-store
    declare -A rates=([A]="" [B]="") accs=([A]="" [B]="")
    for rep in $(seq 1 "$repeats"); do
      for side in $(sides "$rep"); do
        dataset=$([ $side = A ] && echo "$builtin" || echo "$store")
        dir=$([ $side = A ] && echo "$data" || echo "$runs_data")
        spec_file=$(spec "$file" "$dataset")
        log=$work/trainer-$dataset-r$rep.log
        [ "$cold" = 1 ] && { sync; echo 3 > /proc/sys/vm/drop_caches; }
        "$build/worker/pstrain-train" --spec "$spec_file" --data-dir "$dir" --threads 2 >"$log" 2>&1 ||
          { tail -n 20 "$log" >&2; echo "store_read_bench: trainer $side run $rep failed (log: $log)" >&2; exit 1; }
        read -r sps acc <<<"$(/usr/bin/python3 -c '
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.startswith("RESULT ")][-1][7:])
print(r["samples_per_second"], r["final_test_accuracy"])' "$log")"
        printf '%s %s (%s) run %s: %s samples/s, accuracy %s\n' "$builtin" "$side" \
          "$([ $side = A ] && echo memory || echo shards)" "$rep" "$sps" "$acc"
        rates[$side]+="$sps "
        accs[$side]+="$acc "
      done
    done
    summary "$builtin (pstrain-train)" "${rates[A]}" "${rates[B]}" memory shards
    [ "${accs[A]}" = "${accs[B]}" ] || { echo "store_read_bench: accuracies differ: ${accs[A]} / ${accs[B]}" >&2; exit 1; }
    unset rates accs
  done
  exit 0
fi

for job in "fashion-mnist-cnn.json fashion-store" "mnist-mlp.json mnist-store"; do
  read -r file dataset <<<"$job"
  spec_file=$(spec "$file" "$dataset")
  declare -A rates=([A]="" [B]="")
  for rep in $(seq 1 "$repeats"); do
    for side in $(sides "$rep"); do
      from=$([ $side = A ] && echo coordinator || echo store)
      log=$work/$dataset-$side-r$rep.log
      port=$((port + 2))
      [ "$cold" = 1 ] && { sync; echo 3 > /proc/sys/vm/drop_caches; }
      LOCAL_CLUSTER_DIR=$work/cluster-$dataset-$side-$rep RPC_PORT=$port HTTP_PORT=$((port + 1)) SERVERS=2 WORKERS=2 \
        WORKER_THREADS=1 WORKER_FLAGS="--data-from $from" BUILD_DIR=$build PSTRAIN_DATA_DIR=$runs_data \
        timeout -k 10 1800 "$ROOT/deploy/local-cluster.sh" run "$spec_file" >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; echo "store_read_bench: $side run $rep failed (log: $log)" >&2; exit 1; }
      read -r sps acc _ <<<"$(/usr/bin/python3 "$ROOT/tests/bench/suite_jobs.py" parse "$log")"
      reads=$(grep -h "reads its training examples" "$work/cluster-$dataset-$side-$rep"/worker-0.log 2>/dev/null | head -1 |
              sed 's/.*reads its training examples //' | cut -c1-60 || true)
      printf '%s %s (--data-from %s) run %s: %s samples/s, accuracy %s; worker 0 reads %s\n' "$dataset" "$side" "$from" "$rep" \
        "$sps" "$acc" "${reads:-?}"
      rates[$side]+="$sps "
    done
  done
  summary "$dataset" "${rates[A]}" "${rates[B]}" coordinator store
  unset rates
done
