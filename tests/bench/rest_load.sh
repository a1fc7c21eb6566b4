#!/usr/bin/env bash
# Load check of the REST API while a job trains, in one run on one local cluster (2 servers,
# 2 workers, MLP sync): wrk on GET /v1/jobs/{id} at an offered rate (default 5,000 requests/s,
# paced with wrk's Lua delay()), with the job's training samples/s before, under and after that
# load; then wrk unpaced, for the most the API serves (requests/s, p99 latency).
#
#
# --tls: instead, the cost of TLS: two bare coordinators (no nodes, nothing training), one plain
# HTTP and one HTTPS (self-signed certificate), each holding one queued job; wrk unpaced on
# GET /healthz and GET /v1/jobs/{id}, keep-alive and a new connection per request (a TLS
# handshake each), plain and TLS interleaved, --rounds times; the median of each.
#
# Usage: tests/bench/rest_load.sh [--seconds S] [--connections C] [--rate R]   (needs wrk)
#        tests/bench/rest_load.sh --tls [--seconds S] [--connections C] [--rounds N]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
seconds=10 connections=25 rate=5000 tls=0 rounds=3
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --tls) tls=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S] [--connections C] [--rate R] | --tls [--seconds S] [--connections C] [--rounds N]" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "rest_load: wrk is missing (apt-get install wrk)" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call

tls_cost() {
  local dir bin plain_port tls_port plain_pid tls_pid
  dir=$(mktemp -d /tmp/pstrain-tls-load.XXXXXX)
  bin=${BUILD_DIR:-$repo/build}
  [ -x "$bin/coordinator/pstrain-coordinator" ] || BUILD_DIR=$bin "$repo/deploy/build.sh"
  source "$repo/deploy/data-dir.sh"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "/CN=localhost" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
  plain_port=$(free_port) tls_port=$(free_port)
  "$bin/coordinator/pstrain-coordinator" --listen 127.0.0.1:0 --http "127.0.0.1:$plain_port" --state-dir "$dir/plain" \
    --data-dir "$PSTRAIN_DATA_DIR" --datasets-dir "$dir/datasets" --log-level warning >"$dir/plain.log" 2>&1 &
  plain_pid=$!
  "$bin/coordinator/pstrain-coordinator" --listen 127.0.0.1:0 --http "127.0.0.1:$tls_port" --state-dir "$dir/tls" \
    --data-dir "$PSTRAIN_DATA_DIR" --datasets-dir "$dir/datasets" --log-level warning --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem" >"$dir/tls.log" 2>&1 &
  tls_pid=$!
  trap "kill $plain_pid $tls_pid 2>/dev/null; wait 2>/dev/null; rm -rf '$dir'" EXIT
  local plain="http://127.0.0.1:$plain_port" secure="https://127.0.0.1:$tls_port"
  for u in "$plain" "$secure"; do
    until curl -sf --cacert "$dir/cert.pem" -o /dev/null "$u/healthz"; do sleep 0.1; done
  done
  # A job that stays queued (no nodes): its status is what GET /v1/jobs/{id} serves.
  local spec id_plain id_tls
  spec=$(cat "$repo/deploy/jobs/mnist-mlp.json")
  id_plain=$(curl -sf -X POST -H 'Content-Type: application/json' --data "$spec" "$plain/v1/jobs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  id_tls=$(curl -sf --cacert "$dir/cert.pem" -X POST -H 'Content-Type: application/json' --data "$spec" "$secure/v1/jobs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  local results="$dir/results"
  : >"$results"
  run() {  # label, url, wrk options...: appends "label rps p99_ms"
    local label=$1 target=$2; shift 2
    local out rps p99
    out=$(wrk -t1 -c"$connections" -d"${seconds}s" --latency "$@" "$target")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}')
    echo "$label $rps $p99" >>"$results"
  }
  local load_before
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  for r in $(seq 1 "$rounds"); do
    echo "rest_load --tls: round $r/$rounds" >&2
    run healthz/plain "$plain/healthz"
    run healthz/tls "$secure/healthz"
    run status/plain "$plain/v1/jobs/$id_plain"
    run status/tls "$secure/v1/jobs/$id_tls"
    run healthz-newconn/plain "$plain/healthz" -H "Connection: close"
    run healthz-newconn/tls "$secure/healthz" -H "Connection: close"
  done
  echo
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); command: $0 --tls --seconds $seconds --connections $connections --rounds $rounds"
  echo "load average (1, 5, 15 min) before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, rps, p99 = line.split()
    rows.setdefault(label, []).append((float(rps), float(p99)))
def med(label, i): return statistics.median(v[i] for v in rows[label])
names = {"healthz": "GET /healthz (keep-alive)", "status": "GET /v1/jobs/{id} (keep-alive)",
         "healthz-newconn": "GET /healthz, a new connection per request"}
print("| request | HTTP req/s | HTTPS req/s | HTTPS/HTTP req/s | HTTP p99 ms | HTTPS p99 ms | HTTPS/HTTP p99 |")
print("|---|---|---|---|---|---|---|")
for key, name in names.items():
    pr, tr = med(key + "/plain", 0), med(key + "/tls", 0)
    pp, tp = med(key + "/plain", 1), med(key + "/tls", 1)
    print(f"| {name} | {pr:,.0f} | {tr:,.0f} | {tr/pr:.2f} | {pp:.2f} | {tp:.2f} | {tp/pp:.2f} |")
PY
}
if [ "$tls" = 1 ]; then
  tls_cost
  exit 0
fi
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
