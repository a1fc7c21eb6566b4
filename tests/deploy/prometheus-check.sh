#!/usr/bin/env bash
# Runs Debian's `prometheus` against a local pstrain cluster and queries it (its HTTP API,
# /api/v1/query) for the coordinator's series: jobs by state, samples/s, loss, nodes alive, HTTP
# requests by route, and the per-job gauges labelled by job id. Its configuration is
# deploy/prometheus.yml with the target and the interval replaced (and checked with promtool).
#
# Installs nothing: without `prometheus` (Debian package prometheus, which deploy/setup.sh
# installs) it says so and exits 77, which CTest reports as skipped. Needs curl and python3.
# Environment: BUILD_DIR (default ./build), PSTRAIN_DATA_DIR; HTTP_PORT, RPC_PORT, PROMETHEUS_PORT
# (default: free ports); CHECK_TIMEOUT (45 s: how long the queries may take to all have a value).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$repo/build}
case $build in /*) ;; *) build=$repo/$build ;; esac
py=/usr/bin/python3

say() { echo "prometheus-check: $*"; }
fail() { echo "prometheus-check: FAIL: $*" >&2; exit 1; }

if ! command -v prometheus >/dev/null; then
  say "SKIP: prometheus is not installed (apt-get install prometheus; deploy/setup.sh installs it)"
  exit 77
fi
command -v curl >/dev/null || fail "curl is missing"
[ -x "$build/cli/pstrain" ] || fail "no $build/cli/pstrain: build first"

. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
http_port=${HTTP_PORT:-$(free_port)}
rpc_port=${RPC_PORT:-$(free_port)}
prom_port=${PROMETHEUS_PORT:-$(free_port)}
work=$(mktemp -d /tmp/pstrain-prometheus-XXXXXX)
prom_pid=""
cluster() {
  LOCAL_CLUSTER_DIR=$work/cluster HTTP_PORT=$http_port RPC_PORT=$rpc_port SERVERS=1 WORKERS=1 BUILD_DIR=$build \
    DOWN_TIMEOUT=10 "$repo/deploy/local-cluster.sh" "$@"
}
cleanup() {
  local status=$?
  if [ -n "$prom_pid" ] && kill -0 "$prom_pid" 2>/dev/null; then
    kill "$prom_pid" 2>/dev/null || true
    wait "$prom_pid" 2>/dev/null || true
  fi
  cluster down >/dev/null 2>&1 || true
  if [ $status != 0 ]; then
    echo "--- prometheus log (last 20 lines)" >&2; tail -20 "$work/prometheus.log" >&2 2>/dev/null || true
    echo "--- coordinator log (last 20 lines)" >&2; tail -20 "$work/cluster/coordinator.log" >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

# The example configuration, scraping this cluster every second.
# The cluster requires tokens (local-cluster.sh's default): the example's authorization block,
# uncommented, with the cluster's viewer token.
sed -e "s/localhost:8080/127.0.0.1:$http_port/" -e 's/scrape_interval: 15s/scrape_interval: 1s/' \
  -e 's/^    # authorization:/    authorization:/' -e 's/^    #   type: Bearer/      type: Bearer/' \
  -e "s|^    #   credentials_file: .*|      credentials_file: $work/cluster/auth/viewer-token|" \
  "$repo/deploy/prometheus.yml" >"$work/prometheus.yml"
grep -q "credentials_file: $work/cluster/auth/viewer-token" "$work/prometheus.yml" ||
  fail "deploy/prometheus.yml has no commented authorization block to fill in"
grep -q "127.0.0.1:$http_port" "$work/prometheus.yml" || fail "deploy/prometheus.yml has no target localhost:8080 to replace"
cluster up >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "the local cluster did not start"; }
if command -v promtool >/dev/null; then
  promtool check config "$work/prometheus.yml" >/dev/null || fail "promtool refuses deploy/prometheus.yml"
fi

export PSTRAIN_URL=http://127.0.0.1:$http_port
PSTRAIN_TOKEN=$(cat "$work/cluster/auth/admin-token") || fail "the local cluster made no tokens"
export PSTRAIN_TOKEN
# A small job that runs for a while (the gauges of a finished job stay too, but samples/s and
# the progress are then final): the MLP on mnist10k for 30 epochs.
"$py" - "$repo/deploy/jobs/mnist-mlp.json" >"$work/job.json" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["name"] = "prometheus-check"
spec["model"]["layers"][1]["units"] = 128
spec["model"]["layers"][2]["units"] = 64
spec["training"].update(epochs=30, servers=1, workers=1)
print(json.dumps(spec))
EOF
job=$("$build/cli/pstrain" submit "$work/job.json") || fail "the job was not accepted"
say "cluster at $PSTRAIN_URL runs $job; prometheus on 127.0.0.1:$prom_port"

prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
api=http://127.0.0.1:$prom_port
deadline=$((SECONDS + 20))
until curl -fsS -m 2 -o /dev/null "$api/-/ready" 2>/dev/null; do
  kill -0 "$prom_pid" 2>/dev/null || fail "prometheus exited"
  [ $SECONDS -lt $deadline ] || fail "prometheus not ready after 20 s"
  sleep 0.2
done

# name<TAB>PromQL<TAB>expected number of series<TAB>a Python condition on the values (v: a list)
queries="up	up{job=\"pstrain\"}	1	v[0] == 1
jobs by state	pstrain_jobs	6	sum(v) >= 1
running jobs	sum(pstrain_jobs{state=~\"RUNNING|SUCCEEDED\"})	1	v[0] == 1
samples/s	pstrain_job_samples_per_second{job=\"$job\"}	1	v[0] > 0
training loss	pstrain_job_train_loss{job=\"$job\"}	1	0 < v[0] < 10
nodes alive	pstrain_nodes_alive	2	sorted(v) == [1, 1]
HTTP by route	sum by (route) (pstrain_http_requests_total{route=\"/v1/jobs\"})	1	v[0] >= 1
per-job progress	pstrain_job_progress_ratio{job=\"$job\"}	1	0 < v[0] <= 1
per-job info	pstrain_job_info{job=\"$job\",name=\"prometheus-check\",mode=\"sync\"}	1	v[0] == 1
per-job test accuracy	pstrain_job_test_accuracy{job=\"$job\"}	1	0.5 < v[0] <= 1"

query() {  # PromQL -> "N v1 v2 ..." (the number of series, then their values), or "error ..."
  curl -fsS -m 5 -G "$api/api/v1/query" --data-urlencode "query=$1" 2>/dev/null | "$py" -c '
import json, sys
r = json.load(sys.stdin)
if r.get("status") != "success": print("error", r.get("error")); sys.exit()
res = r["data"]["result"]
print(len(res), *[s["value"][1] for s in res])' || echo "error no answer"
}

deadline=$((SECONDS + ${CHECK_TIMEOUT:-45}))
while :; do
  missing=""
  report=""
  while IFS=$'\t' read -r name promql count condition; do
    answer=$(query "$promql")
    read -r n values <<<"$answer"
    ok=0
    if [ "$n" = "$count" ] && "$py" -c "import sys; v=[float(x) for x in sys.argv[1:]]; sys.exit(0 if ($condition) else 1)" $values 2>/dev/null; then
      ok=1
    fi
    report+="  $name: $promql -> $answer$([ $ok = 1 ] || echo "   (want $count series with $condition)")"$'\n'
    [ $ok = 1 ] || missing+=" [$name]"
  done <<<"$queries"
  [ -z "$missing" ] && break
  if [ $SECONDS -ge $deadline ]; then
    printf '%s' "$report" >&2
    fail "after ${CHECK_TIMEOUT:-45} s, no good value for:$missing"
  fi
  sleep 1
done
printf '%s' "$report"
say "OK: prometheus scraped the coordinator and has every series queried"
