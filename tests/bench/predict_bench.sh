#!/usr/bin/env bash
# Prediction latency and throughput of POST /v1/models/{id}:predict while a job trains, on one
# local cluster (2 servers, 2 workers): the MNIST MLP is trained to have a model, a long job is
# started beside it, then wrk sends (a) one instance per request on one connection: p50 / p99
# latency; (b) 256 instances per request on two connections: instances/s. The training job's
# samples/s before and during (b) show what serving costs training.
#
# Usage: tests/bench/predict_bench.sh [--seconds S]   (needs wrk and python3-numpy)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
seconds=10
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S]" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "predict_bench: wrk is missing (apt-get install wrk)" >&2; exit 1; }
python=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
export LOCAL_CLUSTER_DIR=$(mktemp -d /tmp/pstrain-predict.XXXXXX)
export HTTP_PORT=$(free_port) RPC_PORT=$(free_port) SERVERS=2 WORKERS=2
url="http://127.0.0.1:$HTTP_PORT"
trap '"$repo/deploy/local-cluster.sh" down >/dev/null; rm -rf "$LOCAL_CLUSTER_DIR"' EXIT
"$repo/deploy/local-cluster.sh" up

submit() { curl -sf -X POST -H 'Content-Type: application/json' --data "$1" "$url/v1/jobs" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
state() { curl -sf "$url/v1/jobs/$1" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
model=$(submit "$(cat "$repo/deploy/jobs/mnist-mlp.json")")
until [ "$(state "$model")" = SUCCEEDED ]; do sleep 0.5; done
long=$(submit "$("$python" -c "import json; s=json.load(open('$repo/deploy/jobs/mnist-mlp.json')); s['training']['epochs']=500; print(json.dumps(s))")")
steps() { curl -sf "$url/v1/jobs/$long" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["step"])'; }
until [ "$(steps)" -gt 40 ]; do sleep 0.5; done
rate() { local a b; a=$(steps); sleep "$1"; b=$(steps); "$python" -c "print(round(($b - $a) * 128 / $1))"; }

# Request bodies: real mnist10k test images as raw pixel values (0-255, the form :predict takes).
source "$repo/deploy/data-dir.sh"
"$python" - "$PSTRAIN_DATA_DIR" "$LOCAL_CLUSTER_DIR" <<'EOF'
import gzip, json, sys, numpy as np
data, out = sys.argv[1], sys.argv[2]
x = np.frombuffer(gzip.open(f"{data}/mnist10k-test-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28, 1)
x = x.astype(np.int32)
for n in (1, 256):
    body = json.dumps({"instances": x[:n].tolist()})
    lua = 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ' + json.dumps(body) + "\n"
    open(f"{out}/predict-{n}.lua", "w").write(lua)
EOF

before=$(rate 5)
echo "== one instance per request, 1 connection, ${seconds} s"
wrk -t1 -c1 -d"${seconds}s" --latency -s "$LOCAL_CLUSTER_DIR/predict-1.lua" "$url/v1/models/$model:predict" |
  grep -E "Requests/sec|50%|90%|99%|Non-2xx"
echo "== 256 instances per request, 2 connections, ${seconds} s (training samples/s measured meanwhile)"
rate "$seconds" > "$LOCAL_CLUSTER_DIR/during" &
out=$(wrk -t2 -c2 -d"${seconds}s" --latency -s "$LOCAL_CLUSTER_DIR/predict-256.lua" "$url/v1/models/$model:predict")
wait
echo "$out" | grep -E "Requests/sec|50%|99%|Non-2xx"
rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
echo "instances/s: $("$python" -c "print(round($rps * 256))")"
echo "training samples/s: $before before, $(cat "$LOCAL_CLUSTER_DIR/during") while serving batches of 256"
