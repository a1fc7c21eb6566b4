#!/usr/bin/env bash
# clicklog_cluster.sh — the click-log model (clicklog_job.py) on a cluster of processes on this
# machine (deploy/local-cluster.sh), with sparse tables (row pieces on the servers, a step's rows on
# the wire) and with the same tables dense (every table whole on the wire every step), in one run,
# repeats interleaved (sparse, dense, sparse, dense, ...). Per run: samples/s (the job's), test AUC
# and log loss (the test loss of binary cross-entropy), bytes pushed and pulled per step and
# worker (the workers' last progress report), and each process's peak RSS (VmHWM, read before the
# cluster stops). Prints `lscpu`'s model and flags first.
#
# Usage: tests/bench/clicklog_cluster.sh --data DIR [--repeats N] [--epochs E] [--batch B] [--dim D]
#          [--sparse-only] [--kill-server S] [--save-freq N]
#   --data DIR   a dataset directory clicklog.py wrote; its parent is the cluster's data directory
#                and its name the dataset's
#   --dim D          the tables' width (8)
#   --sparse-only    no run with dense tables (for tables too large to travel whole)
#   --kill-server S  each repeat runs twice: uninterrupted, then with server-1 killed (kill -9) S
#                    seconds after the job's first step and started again 2 s later
#                    (`local-cluster.sh restart`, as a supervisor would); prints both final
#                    models' SHA-256 and the recovery's log lines
# Env: RESTART (1; 0: the killed server stays down, its pieces move to the others from a backup),
# KILL_AFTER (step: S seconds after the first step; backup: after the first complete backup),
# JOB_SERVERS (SERVERS; fewer leaves spares: a lost server's pieces move onto one, from a backup),
# SERVERS (2), WORKERS (2), WORKER_THREADS (1), BUILD_DIR (build), HTTP_PORT (8180), KEEP (0:
# each cluster's state, backups and checkpoints are deleted after its run, 1: kept; its logs stay).
# Every cluster's files stay in a temp dir (printed).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DATA="" REPEATS=2 EPOCHS=1 BATCH=512 DIM=8 KINDS="sparse dense" KILL="" SAVE_FREQ=0
while (($#)); do
  case $1 in
    --data) DATA=$(cd "${2:?--data needs a directory}" && pwd); shift 2 ;;
    --repeats) REPEATS=${2:?}; shift 2 ;;
    --epochs) EPOCHS=${2:?}; shift 2 ;;
    --batch) BATCH=${2:?}; shift 2 ;;
    --dim) DIM=${2:?}; shift 2 ;;
    --sparse-only) KINDS=sparse; shift ;;
    --kill-server) KILL=${2:?}; shift 2 ;;
    --save-freq) SAVE_FREQ=${2:?}; shift 2 ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
  esac
done
[ -n "$DATA" ] || { sed -n '2,19p' "$0"; exit 2; }
SERVERS=${SERVERS:-2} WORKERS=${WORKERS:-2}
export HTTP_PORT=${HTTP_PORT:-8180} RPC_PORT=${RPC_PORT:-7180} BUILD=0 AUTH=1
work=$(mktemp -d /tmp/clicklog-cluster.XXXXXX)
echo "clicklog_cluster: files in $work"
lscpu | grep -E '^Model name' || true
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' '; echo

dataset=$(basename "$DATA")
for kind in $KINDS; do
  /usr/bin/python3 "$ROOT/tests/bench/clicklog_job.py" --data "$DATA" --dataset "$dataset" --epochs "$EPOCHS" \
    --batch "$BATCH" --dim "$DIM" --save-freq "$SAVE_FREQ" $([ $kind = dense ] && echo --dense) |
    /usr/bin/python3 -c "
import json, sys
spec = json.load(sys.stdin)
spec['training'].update({'mode': 'sync', 'workers': $WORKERS, 'servers': ${JOB_SERVERS:-$SERVERS}})
print(json.dumps(spec))" >"$work/$kind.json"
done

results=()
run_one() {  # kind repeat [kill]
  local kind=$1 r=$2 kill=${3:-} dir="$work/$1-$2${3:+-kill}"
  export LOCAL_CLUSTER_DIR=$dir PSTRAIN_DATA_DIR=$(dirname "$DATA")
  "$ROOT/deploy/local-cluster.sh" up >"$dir.up.log" 2>&1
  local token; token=$(cat "$dir/auth/admin-token")
  local url="http://127.0.0.1:$HTTP_PORT"
  local id="" answer
  for _ in $(seq 1 30); do  # (the coordinator may still be waiting for its nodes: 503)
    answer=$(curl -s -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
      --data-binary @"$work/$kind.json" "$url/v1/jobs")
    id=$(echo "$answer" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get("id", ""))' 2>/dev/null || true)
    [ -n "$id" ] && break
    sleep 1
  done
  [ -n "$id" ] || { echo "clicklog_cluster: the job was refused: $answer" >&2; exit 1; }
  local state="" killed_at=""
  if [ -n "$kill" ]; then  # the first step (or a complete backup), then S seconds, then kill -9 of server-1
    local mark="worker 0: epoch .* step"
    [ "${KILL_AFTER:-step}" = backup ] && mark="backup at step .* complete on all"
    until grep -q "$mark" "$dir/coordinator.log" 2>/dev/null; do sleep 0.5; done
    sleep "$kill"
    killed_at=$(date +%H:%M:%S.%N | cut -c1-12)
    kill -9 "$(cat "$dir/server-1.pid")"
    echo "clicklog_cluster: killed server-1 (kill -9) at $killed_at"
    sleep 2
    [ "${RESTART:-1}" = 1 ] && "$ROOT/deploy/local-cluster.sh" restart server-1
  fi
  for _ in $(seq 1 3600); do
    state=$(curl -sf -H "Authorization: Bearer $token" "$url/v1/jobs/$id" |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $state in SUCCEEDED|FAILED|CANCELLED) break ;; esac
    sleep 1
  done
  local job; job=$(curl -sf -H "Authorization: Bearer $token" "$url/v1/jobs/$id")
  local model_sha=""
  [ -n "$KILL" ] && [ "$state" = SUCCEEDED ] && model_sha=$(curl -sf -H "Authorization: Bearer $token" "$url/v1/jobs/$id/model" | sha256sum | cut -c1-16)
  if [ -n "$kill" ]; then
    echo "clicklog_cluster: the coordinator's log from the kill on (server-1, moves, steps):"
    awk -v t="$killed_at" '$2 >= t' "$dir/coordinator.log" | { grep -E "server-1|moved|restor|rolled|roll back|RUNNING again|worker 0: epoch" || true; } | head -12 || true
    echo "$job" | /usr/bin/python3 -c 'import json,sys; [print("  note:", n) for n in json.load(sys.stdin).get("notes", [])]'
  fi
  local rss=""
  for p in "$dir"/*.pid; do
    rss+="$(basename "$p" .pid)=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$(cat "$p")/status" 2>/dev/null || echo "(gone)")MB "
  done
  "$ROOT/deploy/local-cluster.sh" down >"$dir.down.log" 2>&1
  [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"/coordinator-state "$dir"/server-*-data "$dir"/datasets
  # The median of worker 0's progress reports (each over the steps since the one before).
  local bytes; bytes=$(grep -h "worker 0: .* B pushed" "$dir/coordinator.log" |
    sed -E 's/.* ([0-9]+) B pushed and ([0-9]+) B pulled per step/\1 \2/' | /usr/bin/python3 -c '
import statistics, sys
rows = [tuple(map(int, l.split())) for l in sys.stdin if l.strip()]
print(int(statistics.median(r[0] for r in rows)), int(statistics.median(r[1] for r in rows)))')
  local line; line=$(echo "$job" | /usr/bin/python3 -c "
import json, sys
j = json.load(sys.stdin)
print('%-6s r%s %-9s samples/s %9.0f  test AUC %.4f  log loss %.4f' % ('$kind', '$r', j['state'],
      j.get('samples_per_second') or 0, j.get('test_auc') or 0, j.get('test_loss') or 0))")
  results+=("$line  bytes/step (worker 0, median of reports) pushed ${bytes% *} pulled ${bytes#* }  peak RSS $rss${model_sha:+  model sha256 $model_sha}${kill:+ (server-1 killed)}")
  echo "${results[-1]}"
}

for r in $(seq 1 "$REPEATS"); do
  for kind in $KINDS; do
    run_one $kind "$r"
    [ -n "$KILL" ] && run_one $kind "$r" "$KILL"
  done
done
echo
echo "clicklog_cluster: $WORKERS worker(s) x $SERVERS server(s), sync, batch $BATCH, tables of width $DIM, $EPOCHS epoch(s), dataset $dataset"
printf '%s\n' "${results[@]}"
