#!/usr/bin/env bash
# Runs a pstrain cluster as plain processes on this machine: one coordinator, SERVERS parameter
# servers and WORKERS workers, with logs and pid files under LOCAL_CLUSTER_DIR.
#
# Usage:
#   deploy/local-cluster.sh up                 start the cluster (builds first if needed)
#   deploy/local-cluster.sh down               stop everything it started (SIGTERM, then SIGKILL)
#   deploy/local-cluster.sh status             list the processes and whether they run
#   deploy/local-cluster.sh run SPEC.json      start a cluster that runs SPEC, wait for the job, stop
#
# Environment (defaults): LOCAL_CLUSTER_DIR (./.cluster), HTTP_PORT (8080), RPC_PORT (7000),
# SERVERS (2), WORKERS (2), WORKER_THREADS (1), PSTRAIN_DATA_DIR (../shared/data or ./data),
# BUILD_DIR (build). The coordinator keeps its jobs in LOCAL_CLUSTER_DIR/coordinator-state, so a
# second `up` lists the jobs of the first.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cluster_dir=$(mkdir -p "${LOCAL_CLUSTER_DIR:-$repo/.cluster}" && cd "${LOCAL_CLUSTER_DIR:-$repo/.cluster}" && pwd)
bin="$repo/${BUILD_DIR:-build}"
rpc_port=${RPC_PORT:-7000}
http_port=${HTTP_PORT:-8080}
servers=${SERVERS:-2}
workers=${WORKERS:-2}

start() {  # name, command...
  local name=$1; shift
  "$@" >"$cluster_dir/$name.log" 2>&1 &
  echo $! >"$cluster_dir/$name.pid"
}

wait_ready() {  # name, seconds
  local deadline=$((SECONDS + $2))
  until grep -q PSTRAIN_READY "$cluster_dir/$1.log" 2>/dev/null; do
    if ! kill -0 "$(cat "$cluster_dir/$1.pid")" 2>/dev/null; then
      echo "local-cluster: $1 exited during start-up; its log:" >&2; tail -20 "$cluster_dir/$1.log" >&2; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then echo "local-cluster: $1 not ready after $2 s" >&2; return 1; fi
    sleep 0.1
  done
}

start_nodes() {
  for i in $(seq 0 $((servers - 1))); do
    start "server-$i" "$bin/server/pstrain-server" --listen 127.0.0.1:0 --coordinator "127.0.0.1:$rpc_port" --name "server-$i"
  done
  for i in $(seq 0 $((workers - 1))); do
    start "worker-$i" "$bin/worker/pstrain-worker" --coordinator "127.0.0.1:$rpc_port" --name "worker-$i" \
      --threads "${WORKER_THREADS:-1}" ${WORKER_FLAGS:-}
  done
  for i in $(seq 0 $((servers - 1))); do wait_ready "server-$i" 30; done
  for i in $(seq 0 $((workers - 1))); do wait_ready "worker-$i" 30; done
}

down() {
  local pids=()
  for f in "$cluster_dir"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$f"
  done
  for _ in $(seq 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

source "$repo/deploy/data-dir.sh"
case "${1:-}" in
  up)
    [ -x "$bin/coordinator/pstrain-coordinator" ] || "$repo/deploy/build.sh"
    start coordinator "$bin/coordinator/pstrain-coordinator" --listen "127.0.0.1:$rpc_port" --http "127.0.0.1:$http_port" \
      --state-dir "$cluster_dir/coordinator-state" --data-dir "$PSTRAIN_DATA_DIR"
    wait_ready coordinator 30
    start_nodes
    echo "local-cluster: up; REST API at http://127.0.0.1:$http_port (logs in $cluster_dir)"
    ;;
  down)
    down
    echo "local-cluster: down"
    ;;
  status)
    for f in "$cluster_dir"/*.pid; do
      [ -e "$f" ] || { echo "local-cluster: nothing running"; exit 0; }
      name=$(basename "$f" .pid)
      if kill -0 "$(cat "$f")" 2>/dev/null; then echo "$name: running (pid $(cat "$f"))"; else echo "$name: stopped"; fi
    done
    ;;
  run)
    spec=${2:?usage: local-cluster.sh run SPEC.json}
    [ -x "$bin/coordinator/pstrain-coordinator" ] || "$repo/deploy/build.sh"
    trap down EXIT
    start coordinator "$bin/coordinator/pstrain-coordinator" --listen "127.0.0.1:$rpc_port" --http "127.0.0.1:$http_port" \
      --state-dir "$cluster_dir/coordinator-state" --data-dir "$PSTRAIN_DATA_DIR" \
      --job "$spec" --exit-when-done ${SAVE_PARAMS:+--save-params "$SAVE_PARAMS"}
    wait_ready coordinator 30
    start_nodes
    status=0
    wait "$(cat "$cluster_dir/coordinator.pid")" || status=$?
    grep -E '^(epoch|final|job)' "$cluster_dir/coordinator.log" || true
    exit $status
    ;;
  *)
    sed -n '2,14p' "$0"; exit 2 ;;
esac
