#!/usr/bin/env bash
# data_path_netbed.sh — the coordinator out of the data path (issue 50, "The coordinator is out
# of the data path"), on the multi-host test bed (tests/netbed/netbed.sh, docs/TESTBED.md): a
# coordinator, 2 servers and 4 workers, each in a network namespace of its own with a
# full-duplex link of RATE (tbf both ways), train one epoch of a job with the workers started
# `--data-from coordinator` (A: every batch streamed by the coordinator, from its disk now) and
# `--data-from store` (B: each worker reads its own examples from the shards; the namespaces share
# the filesystem, as hosts share a volume), interleaved A B A B ...
#
# Measured per run, from the veth counters (everything on the wire, framing included): the bytes
# the coordinator sent and received during the job; the bytes the workers received; the job's
# samples/s (the coordinator's record: training throughput summed over the workers) and test
# accuracy; and the workers' read rate from the store (B: examples/s x bytes an example).
#
# Jobs: deploy/jobs/mnist-mlp.json on mnist10k and deploy/jobs/fashion-mnist-cnn.json on Fashion-
# MNIST, each 1 epoch, 4 workers x 2 servers, sync; the datasets are the IDX files uploaded once
# to a local cluster of this build, which stores them as shards.
#
# Usage: sudo tests/bench/data_path_netbed.sh [--repeats N (2)] [--rate RATE (1gbit; off)]
#          [--jobs "mnist fashion"] [--bed dp1] [--keep]
# Needs root, ip, tc. Env: PSTRAIN_DATA_DIR (the IDX files), PSTRAIN_BUILD_DIR (<repo>/build).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
REPEATS=2 RATE=1gbit JOBS="mnist fashion" BED=dp1 KEEP=0
while (($#)); do
  case $1 in
    --repeats) REPEATS=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --jobs) JOBS=${2:?}; shift 2 ;;
    --bed) BED=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "data_path_netbed.sh: needs root (network namespaces)" >&2; exit 77; }
DATA=${PSTRAIN_DATA_DIR:-}
[ -n "$DATA" ] || for d in "$ROOT/../shared/data" "$ROOT/data"; do [ -f "$d/fashion-train-images-idx3-ubyte.gz" ] && DATA=$(cd "$d" && pwd) && break; done
BUILD=${PSTRAIN_BUILD_DIR:-$ROOT/build}
NETBED=$ROOT/tests/netbed/netbed.sh
PY=/usr/bin/python3
WORK=$(mktemp -d /tmp/data-path-netbed.XXXXXX)
echo "data_path_netbed: logs in $WORK"
lscpu | grep -E '^Model name'
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E 'avx2|avx512f$|avx512_bf16|sse4_2' | tr '\n' ' '; echo

# --- The datasets as shards: uploaded once to a local cluster (plain processes, loopback). ---
prep=$WORK/prep
AUTH=0 PSTRAIN_CLUSTER_SECRET_FILE=none LOCAL_CLUSTER_DIR=$prep RPC_PORT=19780 HTTP_PORT=19781 BUILD_DIR=$BUILD \
  PSTRAIN_DATA_DIR=$DATA "$ROOT/deploy/local-cluster.sh" up >"$WORK/prep.log" 2>&1 || { cat "$WORK/prep.log"; exit 1; }
for name in fashion mnist10k; do
  for split in train test; do
    for part in images labels; do
      curl -sf -o /dev/null -H 'Content-Type: application/gzip' -T "$DATA/$name-$split-$part-idx$([ $part = images ] && echo 3 || echo 1)-ubyte.gz" \
        "http://127.0.0.1:19781/v1/datasets/$name-store/$split/$part"
    done
  done
done
LOCAL_CLUSTER_DIR=$prep "$ROOT/deploy/local-cluster.sh" down >>"$WORK/prep.log" 2>&1
STORE=$prep/datasets
ls "$STORE"

NODES=(c s0 s1 w0 w1 w2 w3)
PIDS=()
stop_nodes() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  stop_nodes
  "$NETBED" -b "$BED" down >/dev/null 2>&1 || true
  if ((KEEP)); then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
"$NETBED" -b "$BED" up "${NODES[@]}" >/dev/null
addr() { "$NETBED" -b "$BED" addr "$1"; }
in_ns() { local n=$1; shift; ip netns exec "psn-$BED-$n" "$@"; }
spawn() { local n=$1; shift; exec ip netns exec "psn-$BED-$n" "$@"; }
if [[ $RATE != off ]]; then
  burst=$($PY -c "import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)bit', sys.argv[1]); \
v=float(m[1])*{'':1,'k':1e3,'m':1e6,'g':1e9}[m[2]]; print(max(65536, int(v/8*0.002)))" "$RATE")
  for node in "${NODES[@]}"; do
    in_ns "$node" tc qdisc replace dev eth0 root tbf rate "$RATE" burst "$burst" latency 1s
    tc qdisc replace dev "psn-$BED-$node" root tbf rate "$RATE" burst "$burst" latency 1s
  done
fi
counter() { in_ns "$1" cat "/sys/class/net/eth0/statistics/$2"; }

spec() {  # job-file dataset -> spec path
  $PY - "$ROOT/deploy/jobs/$1" "$2" "$WORK/$2.json" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["dataset"]["name"] = sys.argv[2]
spec["training"].update({"epochs": 1, "workers": 4, "servers": 2, "mode": "sync"})
spec["training"].pop("validation_fraction", None)
spec.pop("early_stopping", None)
json.dump(spec, open(sys.argv[3], "w"))
EOF
  echo "$WORK/$2.json"
}

run() {  # spec from dir -> prints one JSON line
  local spec=$1 from=$2 dir=$3 i c_addr
  mkdir -p "$dir"
  c_addr=$(addr c)
  spawn c "$BUILD/coordinator/pstrain-coordinator" --listen "$c_addr:19300" --http "$c_addr:19301" \
    --state-dir "$dir/state" --data-dir "$STORE" --datasets-dir "$dir/datasets" >"$dir/coordinator.log" 2>&1 &
  PIDS+=($!)
  for ((i = 0; i < 100; i++)); do grep -q PSTRAIN_READY "$dir/coordinator.log" 2>/dev/null && break; sleep 0.1; done
  for i in 0 1; do
    spawn "s$i" "$BUILD/server/pstrain-server" --listen "$(addr "s$i"):19302" --advertise-host "$(addr "s$i")" \
      --coordinator "$c_addr:19300" --name "server-$i" --data-dir "$dir/server-$i" >"$dir/server-$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1 2 3; do
    spawn "w$i" "$BUILD/worker/pstrain-worker" --coordinator "$c_addr:19300" --name "worker-$i" --threads 1 \
      --data-from "$from" >"$dir/worker-$i.log" 2>&1 &
    PIDS+=($!)
  done
  sleep 2  # every node registered
  local c_tx0 c_rx0 w_rx0=0 w_tx0=0 start end id state
  c_tx0=$(counter c tx_bytes) c_rx0=$(counter c rx_bytes)
  for i in 0 1 2 3; do w_rx0=$((w_rx0 + $(counter "w$i" rx_bytes))); done
  start=$(date +%s.%N)
  id=$(in_ns c curl -sf -H 'Content-Type: application/json' --data @"$spec" "http://$c_addr:19301/v1/jobs" |
    $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  for ((i = 0; i < 3600; i++)); do
    state=$(in_ns c curl -sf "http://$c_addr:19301/v1/jobs/$id" | $PY -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $state in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    sleep 1
  done
  end=$(date +%s.%N)
  local c_tx1 c_rx1 w_rx1=0
  c_tx1=$(counter c tx_bytes) c_rx1=$(counter c rx_bytes)
  for i in 0 1 2 3; do w_rx1=$((w_rx1 + $(counter "w$i" rx_bytes))); done
  in_ns c curl -sf "http://$c_addr:19301/v1/jobs/$id" >"$dir/job.json"
  stop_nodes
  rm -rf "$dir/state" "$dir/datasets" "$dir"/server-*/
  $PY - "$dir/job.json" "$from" "$((c_tx1 - c_tx0))" "$((c_rx1 - c_rx0))" "$((w_rx1 - w_rx0))" "$start" "$end" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(json.dumps({"from": sys.argv[2], "state": j["state"], "coordinator_tx": int(sys.argv[3]),
                  "coordinator_rx": int(sys.argv[4]), "workers_rx": int(sys.argv[5]),
                  "seconds": round(float(sys.argv[7]) - float(sys.argv[6]), 1),
                  "samples_per_second": j.get("samples_per_second"), "test_accuracy": j.get("test_accuracy"),
                  "notes": [n for n in j.get("notes", []) if "served" in n]}))
EOF
}

for job in $JOBS; do
  case $job in
    mnist) file=mnist-mlp.json dataset=mnist10k-store example=784 ;;
    fashion) file=fashion-mnist-cnn.json dataset=fashion-store example=784 ;;
    *) echo "unknown job $job" >&2; exit 2 ;;
  esac
  spec_file=$(spec "$file" "$dataset")
  : >"$WORK/$job.jsonl"
  for rep in $(seq 1 "$REPEATS"); do
    for from in coordinator store; do
      line=$(run "$spec_file" "$from" "$WORK/$job-$from-$rep")
      echo "$job r$rep: $line"
      echo "$line" >>"$WORK/$job.jsonl"
    done
  done
  $PY - "$WORK/$job.jsonl" "$job" "$example" "$RATE" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
example = int(sys.argv[3])
def med(side, key):
    return statistics.median(r[key] for r in rows if r["from"] == side and r.get(key) is not None)
a, b = "coordinator", "store"
print(f"| {sys.argv[2]} ({sys.argv[4]}) | coordinator sends MB/epoch | workers receive MB/epoch | samples/s | test accuracy |")
for side in (a, b):
    print(f"| --data-from {side} | {med(side, 'coordinator_tx') / 1e6:.2f} | {med(side, 'workers_rx') / 1e6:.2f} | "
          f"{med(side, 'samples_per_second'):.0f} | {med(side, 'test_accuracy'):.4f} |")
print(f"store / coordinator: samples/s x{med(b, 'samples_per_second') / med(a, 'samples_per_second'):.3f}; "
      f"coordinator bytes x{med(b, 'coordinator_tx') / med(a, 'coordinator_tx'):.4f}; "
      f"workers' store reads {med(b, 'samples_per_second') * example / 1e6:.1f} MB/s in all")
EOF
done
