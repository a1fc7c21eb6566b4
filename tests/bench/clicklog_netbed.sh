#!/usr/bin/env bash
# clicklog_netbed.sh — the click-log model with sparse tables (clicklog_job.py) scaled over 1, 2
# and 4 parameter servers at a fixed number of workers, on the multi-host test bed
# (tests/netbed/netbed.sh, docs/TESTBED.md): a coordinator, S servers and W workers, each in a
# network namespace of its own with a full-duplex link of RATE (tbf both ways). Runs are
# interleaved (1 2 4 1 2 4 ...). The namespaces share the filesystem (as hosts share a volume):
# the workers read their examples from the dataset's shards, the coordinator plans.
#
# Per run: the job's samples/s (training, summed over the workers), test AUC and log loss; bytes
# pushed and pulled per step by worker 0 (the median of its progress reports: rows and their
# gradients, the dense layers whole); and from the veth counters, the bytes every server sent and
# received during the job and the busiest server's share.
#
# Usage: sudo tests/bench/clicklog_netbed.sh --data DIR [--servers "1 2 4"] [--workers 2]
#          [--repeats N (2)] [--rate RATE (100mbit; off)] [--epochs E (1)] [--dim D (8)] [--bed ck1] [--keep]
#   --data DIR   a dataset directory clicklog.py wrote; its parent is the coordinator's data directory
# Needs root, ip, tc. Env: PSTRAIN_BUILD_DIR (<repo>/build).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DATA="" SERVER_COUNTS="1 2 4" WORKERS=2 REPEATS=2 RATE=100mbit EPOCHS=1 DIM=8 BED=ck1 KEEP=0
while (($#)); do
  case $1 in
    --data) DATA=$(cd "${2:?--data needs a directory}" && pwd); shift 2 ;;
    --servers) SERVER_COUNTS=${2:?}; shift 2 ;;
    --workers) WORKERS=${2:?}; shift 2 ;;
    --repeats) REPEATS=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --epochs) EPOCHS=${2:?}; shift 2 ;;
    --dim) DIM=${2:?}; shift 2 ;;
    --bed) BED=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
[ -n "$DATA" ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "clicklog_netbed.sh: needs root (network namespaces)" >&2; exit 77; }
BUILD=${PSTRAIN_BUILD_DIR:-$ROOT/build}
NETBED=$ROOT/tests/netbed/netbed.sh
PY=/usr/bin/python3
WORK=$(mktemp -d /tmp/clicklog-netbed.XXXXXX)
echo "clicklog_netbed: logs in $WORK"
lscpu | grep -E '^Model name'
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' '; echo

MAX_SERVERS=0
for s in $SERVER_COUNTS; do ((s > MAX_SERVERS)) && MAX_SERVERS=$s; done
NODES=(c)
for ((i = 0; i < MAX_SERVERS; i++)); do NODES+=("s$i"); done
for ((i = 0; i < WORKERS; i++)); do NODES+=("w$i"); done
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

dataset=$(basename "$DATA")
spec() {  # servers -> spec path
  $PY "$ROOT/tests/bench/clicklog_job.py" --data "$DATA" --dataset "$dataset" --epochs "$EPOCHS" --dim "$DIM" |
    $PY -c "
import json, sys
spec = json.load(sys.stdin)
spec['training'].update({'mode': 'sync', 'workers': $WORKERS, 'servers': $1})
print(json.dumps(spec))" >"$WORK/servers-$1.json"
  echo "$WORK/servers-$1.json"
}

run() {  # servers dir -> prints one JSON line
  local servers=$1 dir=$2 i c_addr spec_file
  spec_file=$(spec "$servers")
  mkdir -p "$dir"
  c_addr=$(addr c)
  spawn c "$BUILD/coordinator/pstrain-coordinator" --listen "$c_addr:19300" --http "$c_addr:19301" \
    --state-dir "$dir/state" --data-dir "$(dirname "$DATA")" --datasets-dir "$dir/datasets" >"$dir/coordinator.log" 2>&1 &
  PIDS+=($!)
  for ((i = 0; i < 100; i++)); do grep -q PSTRAIN_READY "$dir/coordinator.log" 2>/dev/null && break; sleep 0.1; done
  for ((i = 0; i < servers; i++)); do
    spawn "s$i" "$BUILD/server/pstrain-server" --listen "$(addr "s$i"):19302" --advertise-host "$(addr "s$i")" \
      --coordinator "$c_addr:19300" --name "server-$i" --data-dir "$dir/server-$i" >"$dir/server-$i.log" 2>&1 &
    PIDS+=($!)
  done
  for ((i = 0; i < WORKERS; i++)); do
    spawn "w$i" "$BUILD/worker/pstrain-worker" --coordinator "$c_addr:19300" --name "worker-$i" --threads 1 \
      >"$dir/worker-$i.log" 2>&1 &
    PIDS+=($!)
  done
  sleep 2  # every node registered
  local tx0=() rx0=() start end id state=""
  for ((i = 0; i < servers; i++)); do tx0+=("$(counter "s$i" tx_bytes)"); rx0+=("$(counter "s$i" rx_bytes)"); done
  start=$(date +%s.%N)
  id=$(in_ns c curl -sf -H 'Content-Type: application/json' --data @"$spec_file" "http://$c_addr:19301/v1/jobs" |
    $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  for ((i = 0; i < 7200; i++)); do
    state=$(in_ns c curl -sf "http://$c_addr:19301/v1/jobs/$id" | $PY -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $state in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    sleep 1
  done
  end=$(date +%s.%N)
  local traffic=""
  for ((i = 0; i < servers; i++)); do
    traffic+="$(($(counter "s$i" tx_bytes) - tx0[i])):$(($(counter "s$i" rx_bytes) - rx0[i])) "
  done
  in_ns c curl -sf "http://$c_addr:19301/v1/jobs/$id" >"$dir/job.json"
  local bytes
  bytes=$(grep -h "worker 0: .* B pushed" "$dir/coordinator.log" |
    sed -E 's/.* ([0-9]+) B pushed and ([0-9]+) B pulled per step/\1 \2/' | $PY -c '
import statistics, sys
rows = [tuple(map(int, l.split())) for l in sys.stdin if l.strip()]
print(int(statistics.median(r[0] for r in rows)) if rows else 0, int(statistics.median(r[1] for r in rows)) if rows else 0)')
  stop_nodes
  rm -rf "$dir/state" "$dir/datasets" "$dir"/server-*/
  $PY - "$dir/job.json" "$servers" "$traffic" "$bytes" "$start" "$end" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
traffic = [tuple(map(int, t.split(":"))) for t in sys.argv[3].split()]
pushed, pulled = map(int, sys.argv[4].split())
print(json.dumps({"servers": int(sys.argv[2]), "state": j["state"],
                  "seconds": round(float(sys.argv[6]) - float(sys.argv[5]), 1),
                  "samples_per_second": j.get("samples_per_second"), "test_auc": j.get("test_auc"),
                  "test_loss": j.get("test_loss"), "pushed_per_step": pushed, "pulled_per_step": pulled,
                  "server_tx": [t for t, _ in traffic], "server_rx": [r for _, r in traffic]}))
EOF
}

: >"$WORK/runs.jsonl"
for rep in $(seq 1 "$REPEATS"); do
  for servers in $SERVER_COUNTS; do
    line=$(run "$servers" "$WORK/servers-$servers-r$rep")
    echo "servers $servers r$rep: $line"
    echo "$line" >>"$WORK/runs.jsonl"
  done
done
$PY - "$WORK/runs.jsonl" "$RATE" "$WORKERS" "$DIM" "$dataset" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\n{sys.argv[3]} workers, sync, tables of width {sys.argv[4]}, dataset {sys.argv[5]}, links {sys.argv[2]} (medians)")
print("| servers | samples/s | x 1 server | test AUC | log loss | B pushed / step (worker 0) | B pulled / step | "
      "MB in+out per server (busiest) | all servers MB |")
print("|---|---|---|---|---|---|---|---|---|")
base = None
for s in sorted({r["servers"] for r in rows}):
    rs = [r for r in rows if r["servers"] == s and r["state"] == "SUCCEEDED"]
    if not rs:
        print(f"| {s} | failed | | | | | | | |"); continue
    m = lambda k: statistics.median(r[k] for r in rs)
    sps = m("samples_per_second")
    base = base or sps
    busiest = statistics.median(max(t + x for t, x in zip(r["server_tx"], r["server_rx"])) for r in rs) / 1e6
    total = statistics.median(sum(r["server_tx"]) + sum(r["server_rx"]) for r in rs) / 1e6
    print(f"| {s} | {sps:.0f} | {sps / base:.2f} | {m('test_auc'):.4f} | {m('test_loss'):.4f} | "
          f"{m('pushed_per_step'):.0f} | {m('pulled_per_step'):.0f} | {busiest:.1f} | {total:.1f} |")
EOF
