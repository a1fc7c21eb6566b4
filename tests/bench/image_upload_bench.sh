#!/usr/bin/env bash
# image_upload_bench.sh — images as users have them (issue 50, "Images"), on a local cluster of
# this build (deploy/local-cluster.sh up: 2 servers, 2 workers):
#   1. Fashion-MNIST written as 70,000 grayscale PNG files in class folders "0".."9" (train as a
#      .zip, test as a .tar; tests/bench/image_set.cc) and uploaded with color_mode=grayscale;
#   2. the same pixels as .npz files in the order the folders are stored (class by class, by IDX
#      index), uploaded beside them;
#   3. a seeded set of colour JPEGs of 24 to 160 pixels a side in 10 classes, uploaded with
#      image_size=32,32 and color_mode=rgb.
# For each upload: seconds, images/s, and the coordinator's peak RSS (VmHWM) after it. Then
# deploy/jobs/fashion-mnist-cnn.json trains for EPOCHS epochs on the PNG dataset and on the NPZ
# one, and their model files' tensors are compared (equal bit for bit: PNG is lossless and the
# order is the same), with each job's test accuracy.
#
# Usage: tests/bench/image_upload_bench.sh [--jpegs N (5000)] [--epochs E (1)] [--build DIR (build)]
# Env: PSTRAIN_DATA_DIR (the Fashion-MNIST IDX files: ../shared/data or ./data), PORT_BASE (19950).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
jpegs=5000 epochs=1 build=build
while [ $# -gt 0 ]; do
  case $1 in
    --jpegs) jpegs=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$ROOT/$build ;; esac
data=${PSTRAIN_DATA_DIR:-}
[ -n "$data" ] || for d in "$ROOT/../shared/data" "$ROOT/data"; do [ -f "$d/fashion-train-images-idx3-ubyte.gz" ] && data=$d && break; done
[ -f "$data/fashion-train-images-idx3-ubyte.gz" ] || { echo "image_upload_bench: no Fashion-MNIST IDX files (PSTRAIN_DATA_DIR)" >&2; exit 1; }
[ -x "$build/tests/pstrain-image-set" ] || { echo "image_upload_bench: build pstrain-image-set first (cmake --build $build --target pstrain-image-set)" >&2; exit 1; }
port=${PORT_BASE:-19950}
http=http://127.0.0.1:$((port + 1))
work=$(mktemp -d /tmp/image-upload-bench.XXXXXX)
echo "image_upload_bench: files and logs in $work"
lscpu | grep -E '^Model name'; lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E 'avx2|avx512f$|avx512_bf16|sse4_2' | tr '\n' ' '; echo

"$build/tests/pstrain-image-set" idx "$data/fashion-train-images-idx3-ubyte.gz" "$data/fashion-train-labels-idx1-ubyte.gz" "$work/fashion-train.zip"
"$build/tests/pstrain-image-set" idx "$data/fashion-test-images-idx3-ubyte.gz" "$data/fashion-test-labels-idx1-ubyte.gz" "$work/fashion-test.tar"
"$build/tests/pstrain-image-set" jpegs "$jpegs" 10 7 "$work/colour.zip"
/usr/bin/python3 - "$data" "$work" <<'PY'
import gzip, io, sys, numpy as np
data, work = sys.argv[1], sys.argv[2]
for split in ("train", "test"):
    x = np.frombuffer(gzip.open(f"{data}/fashion-{split}-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28, 1)
    y = np.frombuffer(gzip.open(f"{data}/fashion-{split}-labels-idx1-ubyte.gz").read()[8:], np.uint8).astype(np.int32)
    order = np.argsort(y, kind="stable")  # class by class, by index: the folders' stored order
    np.savez(f"{work}/fashion-{split}.npz", x=x[order], y=y[order])
PY
ls -l "$work"/*.zip "$work"/*.tar "$work"/*.npz | awk '{print $5, $9}'

export AUTH=0 PSTRAIN_CLUSTER_SECRET_FILE=none
cluster() { LOCAL_CLUSTER_DIR=$work/cluster RPC_PORT=$port HTTP_PORT=$((port + 1)) BUILD_DIR=$build PSTRAIN_DATA_DIR=$data \
  "$ROOT/deploy/local-cluster.sh" "$@"; }
cluster up >"$work/cluster.log" 2>&1
trap 'cluster down >>"$work/cluster.log" 2>&1 || true' EXIT
coordinator_pid=$(cat "$work/cluster/coordinator.pid")

upload() {  # name split type query file images
  local code seconds
  read -r code seconds < <(curl -s -o "$work/$1-$2.json" -w '%{http_code} %{time_total}\n' -H "Content-Type: $3" \
    -T "$5" "$http/v1/datasets/$1/$2$4")
  [ "$code" = 201 ] || { echo "upload of $1/$2 answered $code: $(cat "$work/$1-$2.json")" >&2; exit 1; }
  local rss
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$coordinator_pid/status")
  /usr/bin/python3 -c "import sys; n, s, r = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]); print(f'{sys.argv[4]:28s} {n:6d} images in {s:7.2f} s = {n / s:8.0f} images/s; coordinator peak RSS {r / 1024:.0f} MiB')" \
    "$6" "$seconds" "$rss" "$1/$2"
}
upload fashion-png train application/zip '?color_mode=grayscale' "$work/fashion-train.zip" 60000
upload fashion-png test application/x-tar '?color_mode=grayscale' "$work/fashion-test.tar" 10000
upload fashion-npz train application/x-npz '' "$work/fashion-train.npz" 60000
upload fashion-npz test application/x-npz '' "$work/fashion-test.npz" 10000
upload colour train application/zip '?image_size=32,32&color_mode=rgb' "$work/colour.zip" "$jpegs"
curl -s "$http/v1/datasets/colour" | /usr/bin/python3 -c "import json, sys; d = json.load(sys.stdin); print('colour:', d['input_shape'], d['class_names'][:3], '...', d['splits']['train']['class_counts'])"

train() {  # dataset -> job id
  /usr/bin/python3 - "$ROOT/deploy/jobs/fashion-mnist-cnn.json" "$1" "$epochs" <<'PY' >"$work/job-$1.json"
import json, sys
spec = json.load(open(sys.argv[1]))
spec["dataset"]["name"] = sys.argv[2]
spec["name"] = "image-bench-" + sys.argv[2]
spec["training"]["epochs"] = int(sys.argv[3])
spec.pop("early_stopping", None)
print(json.dumps(spec))
PY
  curl -sf -H 'Content-Type: application/json' --data @"$work/job-$1.json" "$http/v1/jobs" | /usr/bin/python3 -c "import json, sys; print(json.load(sys.stdin)['id'])"
}
wait_job() {  # id
  while :; do
    state=$(curl -sf "$http/v1/jobs/$1" | /usr/bin/python3 -c "import json, sys; print(json.load(sys.stdin)['state'])")
    case $state in SUCCEEDED) return 0 ;; FAILED|CANCELLED) echo "job $1 $state" >&2; return 1 ;; esac
    sleep 2
  done
}
for ds in fashion-png fashion-npz; do
  id=$(train "$ds")
  wait_job "$id"
  curl -sf -o "$work/$ds.safetensors" "$http/v1/models/$id/file"
  curl -sf "$http/v1/jobs/$id" | /usr/bin/python3 -c "import json, sys; j = json.load(sys.stdin); print(f\"$ds: job {j['id']} test accuracy {j.get('test_accuracy')}\")"
done
/usr/bin/python3 - "$work/fashion-png.safetensors" "$work/fashion-npz.safetensors" <<'PY'
import struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return b[8 + n:]
a, b = (tensors(p) for p in sys.argv[1:3])
print("PNG folders vs NPZ, model tensors:", "equal bit for bit" if a == b else "DIFFERENT", f"({len(a)} bytes)")
sys.exit(0 if a == b else 1)
PY
