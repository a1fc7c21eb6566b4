#!/usr/bin/env bash
# Load check of the REST API while a job trains: wrk on GET /v1/jobs/{id} (requests/s, p99
# latency), and the job's training samples/s without load, under load, and without load again,
# all in one run on one local cluster (2 servers, 2 workers, MLP sync).
#
# Usage: tests/bench/rest_load.sh [--seconds S] [--connections C]     (needs wrk: apt-get install wrk)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
seconds=10 connections=16
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S] [--connections C]" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "rest_load: wrk is missing (apt-get install wrk)" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export LOCAL_CLUSTER_DIR=$(mktemp -d /tmp/pstrain-rest-load.XXXXXX)
export HTTP_PORT=$(free_port) RPC_PORT=$(free_port) SERVERS=2 WORKERS=2
url="http://127.0.0.1:$HTTP_PORT"
trap '"$repo/deploy/local-cluster.sh" down >/dev/null' EXIT
"$repo/deploy/local-cluster.sh" up

spec=$(python3 -c "import json; s=json.load(open('$repo/deploy/jobs/mnist-mlp.json')); s['training']['epochs']=200; print(json.dumps(s))")
id=$(curl -sf -X POST -H 'Content-Type: application/json' --data "$spec" "$url/v1/jobs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
steps() { curl -sf "$url/v1/jobs/$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])'; }
until [ "$(steps)" -gt 40 ]; do sleep 0.5; done   # past the first epoch (warm-up)

rate() {  # samples/s over $1 seconds, from the job's step counter (global batch 128)
  local a b; a=$(steps); sleep "$1"; b=$(steps)
  python3 -c "print(round(($b - $a) * 128 / $1))"
}
before=$(rate "$seconds")
steps_a=$(steps)
wrk_out=$(wrk -t1 -c"$connections" -d"${seconds}s" --latency "$url/v1/jobs/$id")
steps_b=$(steps)
under=$(python3 -c "print(round(($steps_b - $steps_a) * 128 / $seconds))")
after=$(rate "$seconds")

rps=$(echo "$wrk_out" | awk '/Requests\/sec/ {print $2}')
p99=$(echo "$wrk_out" | awk '$1 == "99%" {print $2}')
non2xx=$(echo "$wrk_out" | awk '/Non-2xx/ {print $NF}')
echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); command: $0 --seconds $seconds --connections $connections"
echo
echo "| measure | value |"
echo "|---|---|"
echo "| wrk GET /v1/jobs/{id}: requests/s ($connections connections, 1 thread) | $rps |"
echo "| wrk p99 latency | $p99 |"
echo "| non-2xx responses | ${non2xx:-0} |"
echo "| training samples/s, no load (before) | $before |"
echo "| training samples/s, under load | $under |"
echo "| training samples/s, no load (after) | $after |"
python3 -c "b=($before+$after)/2; print(f'| training slowdown under load | {100*(1-$under/b):.1f}% |')"
