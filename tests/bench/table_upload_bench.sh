#!/usr/bin/env bash
# Upload and parse speed of a large table, and the coordinator's peak memory while it parses.
#
#   tests/bench/table_upload_bench.sh [SIZE_MB]      (default 1024; BUILD_DIR: build)
#
# Makes a CSV of about SIZE_MB MB with 50 mixed columns (30 numeric with 5% NA, 10 categorical of
# 5 to 200 categories with 2% empty, 5 boolean yes/no, 5 integer) and a named 3-class label: a
# 10 MB block of seeded random rows repeated (the parser sees the same work per byte as for
# distinct rows; the column types and categories are those of the block). Starts a local
# cluster (deploy/local-cluster.sh, no workers needed), PUTs the file with curl and prints the
# wall time from the first byte sent to the 201 (receive to disk, two parsing passes, the shards
# and the table written, sha256 of each), MB/s, and the coordinator's peak RSS (VmHWM) before
# and after. Prints `lscpu` model and flags with the figures.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
size_mb=${1:-1024}
work=${WORK:-/tmp/table-upload-bench}
mkdir -p "$work"
csv=$work/table-$size_mb.csv

if [ ! -f "$csv" ]; then
  /usr/bin/python3 - "$csv" "$size_mb" <<'EOF'
import sys
import numpy as np
path, size_mb = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
rows = 50_000
cols, names = [], []
for j in range(30):
    v = rng.normal(10 ** (j % 5), 10 ** (j % 5) / 3, rows).round(3).astype(str).astype(object)
    v[rng.random(rows) < 0.05] = "NA"
    cols.append(v); names.append(f"num{j}")
for j in range(10):
    k = [5, 10, 20, 50, 200][j % 5]
    v = np.array([f"cat{j}_{i}" for i in rng.integers(0, k, rows)], dtype=object)
    v[rng.random(rows) < 0.02] = ""
    cols.append(v); names.append(f"cat{j}")
for j in range(5):
    cols.append(np.where(rng.random(rows) < 0.5, "yes", "no").astype(object)); names.append(f"flag{j}")
for j in range(5):
    cols.append(rng.integers(0, 1000, rows).astype(str).astype(object)); names.append(f"int{j}")
label = np.array(["low", "mid", "high"], dtype=object)[rng.integers(0, 3, rows)]
lines = [",".join(r) for r in zip(*cols, label)]
block = ("\n".join(lines) + "\n").encode()
with open(path, "wb") as f:
    f.write((",".join(names) + ",label\n").encode())
    written = 0
    while written < size_mb * 1_000_000:
        f.write(block)
        written += len(block)
EOF
fi
bytes=$(stat -c %s "$csv")
echo "table: $csv, $bytes bytes, $(($(wc -l <"$csv") - 1)) rows, 50 feature columns"
lscpu | grep -E "Model name|^Flags" | sed 's/^Flags:\s*/Flags: /' | cut -c1-400

. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
dir=$(mktemp -d /tmp/pstrain-upload-bench.XXXXXX)
export LOCAL_CLUSTER_DIR=$dir BUILD_DIR=${BUILD_DIR:-build} BUILD=0 SERVERS=1 WORKERS=0 AUTH=0
export HTTP_PORT=$(free_port) RPC_PORT=$(free_port)
lc=$repo/deploy/local-cluster.sh
trap '"$lc" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$lc" up >/dev/null
pid=$(cat "$dir/coordinator.pid")
rss() { grep -E "^$1:" "/proc/$pid/status" | awk '{print $2}'; }
before=$(rss VmHWM)
start=$(date +%s.%N)
status=$(curl -s -o "$dir/answer.json" -w '%{http_code}' -H 'Content-Type: text/csv' -T "$csv" \
  "http://127.0.0.1:$HTTP_PORT/v1/datasets/big/train?label=label")
end=$(date +%s.%N)
after=$(rss VmHWM)
[ "$status" = 201 ] || { echo "upload failed: HTTP $status: $(head -c 600 "$dir/answer.json")"; exit 1; }
python3 - "$bytes" "$start" "$end" "$before" "$after" "$dir/answer.json" <<'EOF'
import json, sys
size, start, end, before, after, answer = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
d = json.load(open(answer))
t = d["splits"]["train"]["table"]
types = {}
for c in t["columns"]:
    types[c["type"]] = types.get(c["type"], 0) + 1
seconds = end - start
print(f"upload + parse: {seconds:.1f} s, {size / 1e6 / seconds:.1f} MB/s; {t['rows']} rows; column types {types}")
print(f"coordinator peak RSS (VmHWM): {before / 1024:.0f} MiB before, {after / 1024:.0f} MiB after")
print("RESULT " + json.dumps({"bytes": size, "seconds": round(seconds, 2), "mb_per_s": round(size / 1e6 / seconds, 1),
                              "rows": t["rows"], "peak_rss_mib_before": round(before / 1024), "peak_rss_mib_after": round(after / 1024)}))
EOF
