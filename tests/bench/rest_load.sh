#!/usr/bin/env bash
# Load check of the REST API while a job trains, in one run on one local cluster (2 servers,
# 2 workers, MLP sync): wrk on GET /v1/jobs/{id} at an offered rate (default 5,000 requests/s,
# paced with wrk's Lua delay()), with the job's training samples/s before, under and after that
# load; then wrk unpaced, for the most the API serves (requests/s, p99 latency).
#
# Usage: tests/bench/rest_load.sh [--seconds S] [--connections C] [--rate R]   (needs wrk)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
seconds=10 connections=25 rate=5000
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S] [--connections C] [--rate R]" >&2; exit 2 ;;
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
# Each connection waits `delay` ms between requests: connections * 1000 / delay = the offered rate.
pace="$LOCAL_CLUSTER_DIR/pace.lua"
# (wrk's delay is whole milliseconds and each request also takes its own latency: round down.)
echo "function delay() return $(( (connections * 1000 / rate) > 1 ? connections * 1000 / rate - 1 : 1 )) end" > "$pace"
# CPU seconds a process has used (utime + stime from /proc), and wrk run under a CPU meter.
cpu_of() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }
metered() { python3 -c '
import resource, subprocess, sys
out = subprocess.run(sys.argv[1:], capture_output=True, text=True).stdout
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(out); print("WRK_CPU_SECONDS", r.ru_utime + r.ru_stime)' "$@"; }
coordinator_pid=$(cat "$LOCAL_CLUSTER_DIR/coordinator.pid")
before=$(rate "$seconds")
steps_a=$(steps)
coordinator_cpu_a=$(cpu_of "$coordinator_pid")
paced=$(metered wrk -t1 -c"$connections" -d"${seconds}s" --latency -s "$pace" "$url/v1/jobs/$id")
coordinator_cpu_b=$(cpu_of "$coordinator_pid")
steps_b=$(steps)
under=$(python3 -c "print(round(($steps_b - $steps_a) * 128 / $seconds))")
after=$(rate "$seconds")
unpaced=$(wrk -t1 -c"$connections" -d"${seconds}s" --latency "$url/v1/jobs/$id")

rps=$(echo "$paced" | awk '/Requests\/sec/ {print $2}')
p99=$(echo "$paced" | awk '$1 == "99%" {print $2}')
non2xx=$(echo "$paced" | awk '/Non-2xx/ {print $NF}')
max_rps=$(echo "$unpaced" | awk '/Requests\/sec/ {print $2}')
max_p99=$(echo "$unpaced" | awk '$1 == "99%" {print $2}')
wrk_cpu=$(echo "$paced" | awk '/WRK_CPU_SECONDS/ {print $2}')
echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); command: $0 --seconds $seconds --connections $connections --rate $rate"
echo
echo "| measure | value |"
echo "|---|---|"
echo "| wrk GET /v1/jobs/{id} paced at $rate/s: requests/s served ($connections connections) | $rps |"
echo "| p99 latency at that rate | $p99 |"
echo "| non-2xx responses | ${non2xx:-0} |"
echo "| wrk unpaced: requests/s (the most served, while training) | $max_rps |"
echo "| p99 latency unpaced | $max_p99 |"
python3 -c "print(f'| CPU used while paced: the coordinator (HTTP + training control) / wrk | {100*($coordinator_cpu_b-$coordinator_cpu_a)/$seconds:.0f}% / {100*$wrk_cpu/$seconds:.0f}% of one core |')"
echo "| training samples/s, no load (before) | $before |"
echo "| training samples/s, under load | $under |"
echo "| training samples/s, no load (after) | $after |"
python3 -c "b=($before+$after)/2; print(f'| training slowdown under load | {100*(1-$under/b):.1f}% |')"
