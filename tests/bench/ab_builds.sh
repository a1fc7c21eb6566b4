#!/usr/bin/env bash
# ab_builds.sh — two builds of pstrain side by side in one run, alternated, as ratios: what a change
# costs or gains. For each repeat, A then B (odd repeats) or B then A (even repeats):
#   train   deploy/local-cluster.sh run of the MNIST MLP (deploy/jobs/mnist-mlp.json, --epochs E) in
#           sync 2 x 2 and async 2 x 2; samples/s of a run = median of the coordinator's per-epoch
#           figures without epoch 1 (as cluster_bench.sh counts them)
#   rest    a local cluster (2 x 2) runs 1-epoch MLP jobs back to back (each one ends by writing its
#           model) while wrk reads GET /v1/jobs/{id} for --rest-seconds at 25 connections, unpaced:
#           requests/s and p99 latency of the REST API while jobs train and write their models
# Usage: tests/bench/ab_builds.sh --a DIR --b DIR [--repeats N] [--epochs E] [--rest-seconds S] [--only LIST]
#   LIST: comma-separated subset of sync,async,rest (default: all three)
#   DIR: a build directory (absolute) holding coordinator/, server/ and worker/ binaries.
# Needs wrk (apt-get install wrk). Env: PSTRAIN_DATA_DIR (default: deploy/data-dir.sh's choice).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
A= B= repeats=3 epochs=4 rest_seconds=10 only=sync,async,rest
while [ $# -gt 0 ]; do
  case $1 in
    --a) A=$2; shift 2 ;;
    --b) B=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --rest-seconds) rest_seconds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: $0 --a DIR --b DIR [--repeats N] [--epochs E] [--rest-seconds S] [--only LIST]" >&2; exit 2 ;;
  esac
done
[ -x "$A/coordinator/pstrain-coordinator" ] && [ -x "$B/coordinator/pstrain-coordinator" ] ||
  { echo "ab_builds: --a and --b must be build directories with the binaries" >&2; exit 2; }
command -v wrk >/dev/null || { echo "ab_builds: wrk is missing (apt-get install wrk)" >&2; exit 1; }
source "$repo/deploy/data-dir.sh"
work=$(mktemp -d /tmp/pstrain-ab.XXXXXX)
results=$work/results.tsv
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
spec() {  # MODE EPOCHS -> spec file
  python3 - "$repo/deploy/jobs/mnist-mlp.json" "$1" "$2" "$work/mlp-$1-$2.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["training"].update(mode=sys.argv[2], epochs=int(sys.argv[3]), workers=2, servers=2)
json.dump(s, open(sys.argv[4], "w"))
PY
  echo "$work/mlp-$1-$2.json"
}
median_sps() {  # LOG -> median per-epoch samples/s without epoch 1
  python3 - "$1" <<'PY'
import re, statistics, sys
eps = [(int(e), float(s)) for e, s in re.findall(r"^epoch (\d+):.*\|\s*([\d.]+) samples/s", open(sys.argv[1]).read(), re.M)]
timed = [s for e, s in eps if e > 1] or [s for _, s in eps]
print(f"{statistics.median(timed):.1f}" if timed else "nan")
PY
}
train() {  # LABEL BUILD MODE REP
  local log=$work/train-$1-$3-$4.log
  LOCAL_CLUSTER_DIR=$work/cluster-$1-$3-$4 HTTP_PORT=$(free_port) RPC_PORT=$(free_port) SERVERS=2 WORKERS=2 BUILD=0 \
    BUILD_DIR=$2 timeout -k 10 900 "$repo/deploy/local-cluster.sh" run "$(spec "$3" "$epochs")" >"$log" 2>&1 || true
  local sps; sps=$(median_sps "$log")
  printf 'train-%s\t%s\t%s\t%s\n' "$3" "$1" "$4" "$sps" >>"$results"
  printf '  train %-5s %s run %s: %s samples/s\n' "$3" "$1" "$4" "$sps"
}
rest() {  # LABEL BUILD REP
  local dir=$work/rest-$1-$3 http; http=$(free_port)
  export LOCAL_CLUSTER_DIR=$dir HTTP_PORT=$http RPC_PORT=$(free_port) SERVERS=2 WORKERS=2 BUILD=0 BUILD_DIR=$2
  "$repo/deploy/local-cluster.sh" up >"$dir.up.log" 2>&1
  local url=http://127.0.0.1:$http one; one=$(spec sync 1)
  # The cluster's REST API takes the admin token local-cluster.sh made.
  local auth="Authorization: Bearer $(cat "$dir/auth/admin-token")"
  local id; id=$(curl -sf -H "$auth" -X POST -H 'Content-Type: application/json' --data @"$one" "$url/v1/jobs" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  (  # jobs back to back: each ends by writing its model
    end=$((SECONDS + rest_seconds + 5))
    while [ $SECONDS -lt $end ]; do
      j=$(curl -sf -H "$auth" -X POST -H 'Content-Type: application/json' --data @"$one" "$url/v1/jobs" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') || break
      until curl -sf -H "$auth" "$url/v1/jobs/$j" | grep -q '"state":"\(SUCCEEDED\|FAILED\|CANCELLED\)"'; do
        [ $SECONDS -lt $end ] || break; sleep 0.2; done
    done
  ) &
  local jobs_pid=$!
  sleep 2
  wrk -t 2 -c 25 -d "${rest_seconds}s" --latency -H "$auth" "$url/v1/jobs/$id" >"$dir.wrk.log" 2>&1 || true
  wait "$jobs_pid" 2>/dev/null || true
  local models; models=$(curl -sf -H "$auth" "$url/v1/jobs" | grep -o '"state":"SUCCEEDED"' | wc -l)
  "$repo/deploy/local-cluster.sh" down >/dev/null 2>&1 || true
  unset LOCAL_CLUSTER_DIR HTTP_PORT RPC_PORT
  local rps p99
  rps=$(awk '/Requests\/sec/ {print $2}' "$dir.wrk.log")
  p99=$(awk '$1 == "99%" {print $2}' "$dir.wrk.log")
  printf 'rest-rps\t%s\t%s\t%s\nrest-p99\t%s\t%s\t%s\n' "$1" "$3" "$rps" "$1" "$3" "$p99" >>"$results"
  printf '  rest %s run %s: %s requests/s, p99 %s, %s job(s) finished and wrote their model\n' "$1" "$3" "$rps" "$p99" "$models"
}
echo "ab_builds: A=$A B=$B, $repeats repeat(s), $epochs epochs, logs in $work"
for rep in $(seq 1 "$repeats"); do
  if [ $((rep % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for label in $order; do
    dir=$A; [ "$label" = B ] && dir=$B
    [[ ,$only, == *,sync,* ]] && train "$label" "$dir" sync "$rep"
    [[ ,$only, == *,async,* ]] && train "$label" "$dir" async "$rep"
    [[ ,$only, == *,rest,* ]] && rest "$label" "$dir" "$rep"
  done
done
python3 - "$results" <<'PY'
import collections, re, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
def ms(v):
    m = re.match(r"([\d.]+)(us|ms|s)$", v)
    return float(m[1]) * {"us": 1e-3, "ms": 1, "s": 1e3}[m[2]] if m else float("nan")
for line in open(sys.argv[1]):
    what, label, rep, value = line.split()
    rows[what][label].append(ms(value) if what == "rest-p99" else float(value))
print("\n| measure | A (median) | B (median) | B / A |")
print("|---|---|---|---|")
for what, unit in [("train-sync", "samples/s"), ("train-async", "samples/s"), ("rest-rps", "requests/s"), ("rest-p99", "ms")]:
    if what not in rows: continue
    a, b = statistics.median(rows[what]["A"]), statistics.median(rows[what]["B"])
    print(f"| {what} ({unit}) | {a:.1f} | {b:.1f} | {b / a:.3f} |")
PY
