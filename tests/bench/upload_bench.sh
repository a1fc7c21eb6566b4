#!/usr/bin/env bash
# Upload speed of the dataset catalog, and the coordinator's memory while it takes a big file:
# a NumPy .npz of about SIZE MiB (default 1024; float32 x of shape (n, 256), int32 y over 10
# classes, written uncompressed by numpy.savez) is PUT to a fresh coordinator on loopback with curl.
# Reported: the PUT's wall time and MB/s (until the 201, so receiving, hashing, checking and
# converting to the stored shards all count), the coordinator's resident memory before, and its
# peak (VmHWM) after: it must not grow with the file.
#
# Usage: tests/bench/upload_bench.sh [--mib SIZE] [--build DIR]   (needs python3-numpy)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
mib=1024 build="$repo/build"
while [ $# -gt 0 ]; do
  case $1 in
    --mib) mib=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 [--mib SIZE] [--build DIR]" >&2; exit 2 ;;
  esac
done
python=/usr/bin/python3
dir=$(mktemp -d /tmp/pstrain-upload.XXXXXX)
trap 'kill $coordinator 2>/dev/null || true; rm -rf "$dir"' EXIT

echo "writing a ${mib} MiB .npz ..."
"$python" - "$dir/big.npz" "$mib" <<'EOF'
import sys, numpy as np
path, mib = sys.argv[1], int(sys.argv[2])
n = mib * (1 << 20) // (256 * 4)
rng = np.random.default_rng(0)
y = rng.integers(0, 10, n).astype(np.int32)
x = np.empty((n, 256), np.float32)
step = 1 << 16
for i in range(0, n, step):
    x[i:i + step] = rng.standard_normal((min(step, n - i), 256), dtype=np.float32)
np.savez(path, x=x, y=y)
EOF
bytes=$(stat -c %s "$dir/big.npz")

port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$dir/data"
"$build/coordinator/pstrain-coordinator" --listen 127.0.0.1:0 --http "127.0.0.1:$port" --data-dir "$dir/data" \
  --state-dir "$dir/state" > "$dir/coordinator.log" 2>&1 &
coordinator=$!
until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; do sleep 0.1; done
sleep 1  # the catalog's start-up indexing
rss() { awk "/^$1:/ {print int(\$2 / 1024)}" "/proc/$coordinator/status"; }
before=$(rss VmRSS)

start=$(date +%s.%N)
status=$(curl -s -o "$dir/answer.json" -w "%{http_code}" -H "Content-Type: application/x-npz" \
  -T "$dir/big.npz" "http://127.0.0.1:$port/v1/datasets/big/train")
end=$(date +%s.%N)
[ "$status" = 201 ] || { echo "upload failed: HTTP $status: $(head -c 400 "$dir/answer.json")" >&2; exit 1; }
peak=$(rss VmHWM)
seconds=$("$python" -c "print(round($end - $start, 2))")
echo "upload: $bytes bytes in $seconds s = $("$python" -c "print(round($bytes / 1e6 / ($end - $start), 1))") MB/s (receive, hash, check, convert)"
echo "coordinator RSS: $before MiB before, peak $peak MiB (file: $((bytes >> 20)) MiB)"
"$python" -c "import json; d=json.load(open('$dir/answer.json')); print('stored:', d['splits']['train']['examples'], 'examples of', d['input_shape'], d['dtype'])"
echo "the coordinator's account (received, converted, stored):"
grep -E "dataset big: |dataset big " "$dir/coordinator.log" | sed 's/^/  /'
