#!/usr/bin/env bash
# sparse_memory_bound.sh — embedding tables larger than a worker may hold (issue 51, "Bounded
# memory"): the synthetic click log (tests/bench/clicklog.py, ROWS rows, id cardinalities up to
# MAX_CARD) and its job (tests/bench/clicklog_job.py: a sparse table per id column of DIM values a
# row, Adagrad), sync on a local cluster of 2 servers and 2 workers whose every process runs in a
# cgroup v1 memory group of its own: each worker limited to WORKER_MIB (far below the tables), each
# server to SERVER_MIB (below the whole state, above its half), the coordinator to COORD_MIB.
# Reported: lscpu, the tables' size, the job's state, samples/s and test AUC, each process's peak
# RSS and its group's peak charge and limit hits. Exits non-zero when the job does not succeed or
# the OOM killer killed in any group.
#
# Usage: tests/bench/sparse_memory_bound.sh [--rows 200000] [--max-card 4000000] [--dim 16]
#        [--worker-mib 96] [--server-mib 2048] [--coord-mib 1536] [--build DIR (build)] [--keep]
# Needs root (cgroup v1's memory controller at /sys/fs/cgroup/memory) and /usr/bin/python3 with
# numpy. Ports: PORT_BASE (default 19800).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rows=200000 max_card=4000000 dim=16 worker_mib=96 server_mib=2048 coord_mib=1536 build=build keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --rows) rows=$2; shift 2 ;;
    --max-card) max_card=$2; shift 2 ;;
    --dim) dim=$2; shift 2 ;;
    --worker-mib) worker_mib=$2; shift 2 ;;
    --server-mib) server_mib=$2; shift 2 ;;
    --coord-mib) coord_mib=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$ROOT/$build ;; esac
python=/usr/bin/python3
cg_root=/sys/fs/cgroup/memory
[ -w "$cg_root" ] || { echo "sparse_memory_bound: needs root and cgroup v1's memory controller at $cg_root" >&2; exit 1; }
port=${PORT_BASE:-19800}
work=$(mktemp -d /var/tmp/pstrain-sparse-mem.XXXXXX)
group=$cg_root/pstrain-sparse-$$
cleanup() {
  LOCAL_CLUSTER_DIR=$work/cluster "$ROOT/deploy/local-cluster.sh" down >/dev/null 2>&1 || true
  for g in "$group"/*/; do [ -d "$g" ] && rmdir "$g" 2>/dev/null; done
  rmdir "$group" 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
lscpu | grep -E '^Model name'
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' '; echo

mkdir -p "$work/data"
"$python" "$ROOT/tests/bench/clicklog.py" --out "$work/data/clicks" --rows "$rows" --test-rows 20000 --max-cardinality "$max_card" >/dev/null
"$python" "$ROOT/tests/bench/clicklog_job.py" --data "$work/data/clicks" --dataset clicks --dim "$dim" |
  "$python" -c "
import json, sys
spec = json.load(sys.stdin)
spec['training'].update({'mode': 'sync', 'workers': 2, 'servers': 2})
print(json.dumps(spec))" >"$work/spec.json"
"$python" - "$work/data/clicks/oracle.json" "$dim" <<'EOF'
import json, sys
cards = json.load(open(sys.argv[1]))["cardinalities"]
dim = int(sys.argv[2])
params = sum(cards) * dim
print(f"tables: {sum(cards):,} rows x {dim} = {params:,} parameters, {params * 4 / 2**20:,.0f} MiB "
      f"({params * 8 / 2**20:,.0f} MiB with Adagrad's slots)")
EOF
echo "limits: workers $worker_mib MiB, servers $server_mib MiB, coordinator $coord_mib MiB each"

export AUTH=0 PSTRAIN_CLUSTER_SECRET_FILE=none
url=http://127.0.0.1:$((port + 1))
LOCAL_CLUSTER_DIR=$work/cluster RPC_PORT=$port HTTP_PORT=$((port + 1)) SERVERS=2 WORKERS=2 WORKER_THREADS=1 \
  BUILD=0 BUILD_DIR=$build PSTRAIN_DATA_DIR=$work/data "$ROOT/deploy/local-cluster.sh" up >"$work/up.log" 2>&1 ||
  { cat "$work/up.log"; exit 1; }
mkdir -p "$group"
limit() {  # name pid MiB
  mkdir -p "$group/$1"
  echo $(($3 << 20)) >"$group/$1/memory.limit_in_bytes"
  echo "$2" >"$group/$1/cgroup.procs"
}
names=(coordinator server-0 server-1 worker-0 worker-1)
for name in "${names[@]}"; do
  case $name in worker-*) mib=$worker_mib ;; server-*) mib=$server_mib ;; *) mib=$coord_mib ;; esac
  limit "$name" "$(cat "$work/cluster/$name.pid")" "$mib"
done

start=$(date +%s)
job=""
for _ in $(seq 1 30); do  # (the coordinator may still be waiting for its nodes: 503)
  job=$(curl -s -H 'Content-Type: application/json' --data @"$work/spec.json" "$url/v1/jobs" |
    "$python" -c 'import json,sys; print(json.load(sys.stdin).get("id", ""))' 2>/dev/null || true)
  [ -n "$job" ] && break
  sleep 1
done
[ -n "$job" ] || { echo "sparse_memory_bound: the job was refused" >&2; exit 1; }
state=""
while :; do
  state=$(curl -sf "$url/v1/jobs/$job" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["state"])' || echo gone)
  case $state in SUCCEEDED | FAILED | CANCELLED | gone) break ;; esac
  [ $(($(date +%s) - start)) -lt 1800 ] || { echo "sparse_memory_bound: job still $state after 1800 s" >&2; break; }
  sleep 2
done
curl -sf "$url/v1/jobs/$job" | "$python" -c '
import json, sys
j = json.load(sys.stdin)
state, rate, auc = j["state"], j.get("samples_per_second") or 0, j.get("test_auc")
print(f"job: {state}; samples/s {rate:.0f}; test AUC {auc}")
for n in j.get("notes", [])[-2:]: print("  note:", n)' || true
echo "peak memory per process:"
failed=0
for name in "${names[@]}"; do
  pid=$(cat "$work/cluster/$name.pid")
  hwm=$(awk '/^VmHWM:/ {print int($2 / 1024)}' "/proc/$pid/status" 2>/dev/null || echo "(gone)")
  kills=$(awk '/^oom_kill / {print $2}' "$group/$name/memory.oom_control")
  echo "  $name: RSS peak $hwm MiB; group peak $(( $(cat "$group/$name/memory.max_usage_in_bytes") >> 20 )) MiB (page cache included), limit $(( $(cat "$group/$name/memory.limit_in_bytes") >> 20 )) MiB hit $(cat "$group/$name/memory.failcnt") times, OOM kills $kills"
  [ "$kills" = 0 ] || failed=1
done
[ "$state" = SUCCEEDED ] || { echo "sparse_memory_bound: FAIL: the job ended $state" >&2; failed=1; }
[ "$failed" = 0 ] || { echo "sparse_memory_bound: FAIL" >&2; exit 1; }
echo "sparse_memory_bound: ok"
