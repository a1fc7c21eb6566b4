#!/usr/bin/env bash
# big_data_bench.sh — a split several times larger than the memory every process may use
# (issue 50, "Bigger than memory"): GIB GiB of float32 rows (WIDTH values each, 10 classes by a
# fixed linear rule on the first 16 values, so accuracy means something) uploaded as an
# uncompressed zip64 .npz to a local cluster (1 server, 2 workers) whose every process runs in a
# cgroup v1 memory group of its own limited to LIMIT MiB; a sync MLP job trains one epoch on it
# and is evaluated on a 20,000-row test split; then the standalone trainer (pstrain-train) trains
# the same spec on the same stored dataset in such a group too (--servers 1: the cluster's twin).
#
# Reported: lscpu's model and flags; the upload's seconds and MB/s; the job's seconds, samples/s
# and test accuracy; each process's peak RSS (VmHWM) and its group's peak charge
# (memory.max_usage_in_bytes: RSS plus the page cache it was charged, which the kernel reclaims
# at the limit) and whether the group ever hit its limit (memory.failcnt); the trainer's the same.
#
# With --table, the rows are a CSV table instead (GIB GiB as float32 once stored; a header
# f0..f<WIDTH-1>,label, values with 3 decimals, about 1 in 50 missing): the upload parses and
# profiles it, and the job standardizes every column (mean imputation and missing indicators,
# the default preprocessing), fitted and applied by the coordinator and the trainer in passes
# over the stored rows.
#
# Usage: tests/bench/big_data_bench.sh [--gib 12] [--width 1024] [--limit-mib 2048] [--build DIR (build)]
#        [--data-from store|coordinator (store)] [--table] [--no-trainer] [--keep] [--timeout S (3600)]
# Exits non-zero (a test: CTest's memory_bound runs it small) when an upload fails, the job does
# not succeed within the timeout, a group's OOM killer killed anything, the trainer fails, or the
# trainer's test accuracy differs from the cluster job's.
# --data-from coordinator: the workers read nothing themselves; the coordinator reads every
# batch from its disk for them (the path of workers that cannot see the store).
# Needs root (cgroup v1's memory controller at /sys/fs/cgroup/memory), /usr/bin/python3 with
# numpy, and about 2.2 x GIB of free disk in /var/tmp (the .npz, the upload's staging copy, the
# shards). Ports: PORT_BASE (default 19700).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
gib=12 width=1024 limit_mib=2048 build=build trainer=1 keep=0 data_from=store timeout=3600 table=0
while [ $# -gt 0 ]; do
  case $1 in
    --gib) gib=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    --limit-mib) limit_mib=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --data-from) data_from=$2; shift 2 ;;
    --no-trainer) trainer=0; shift ;;
    --table) table=1; shift ;;
    --keep) keep=1; shift ;;
    --timeout) timeout=$2; shift 2 ;;
    *) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$ROOT/$build ;; esac
python=/usr/bin/python3
cg_root=/sys/fs/cgroup/memory
[ -w "$cg_root" ] || { echo "big_data_bench: needs root and cgroup v1's memory controller at $cg_root" >&2; exit 1; }
port=${PORT_BASE:-19700}
work=$(mktemp -d /var/tmp/pstrain-big.XXXXXX)
group=$cg_root/pstrain-big-$$
cleanup() {
  LOCAL_CLUSTER_DIR=$work/cluster "$ROOT/deploy/local-cluster.sh" down >/dev/null 2>&1 || true
  for g in "$group"/*/; do [ -d "$g" ] && rmdir "$g" 2>/dev/null; done
  rmdir "$group" 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
echo "big_data_bench: $gib GiB of float32 rows of $width values; every process limited to $limit_mib MiB; workers read from the $data_from; work in $work"
lscpu | grep -E '^Model name'
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E 'avx2|avx512f$|avx512_bf16|sse4_2' | tr '\n' ' '; echo
t() { date +%s.%N; }
secs() { "$python" -c "print(round($2 - $1, 1))"; }

# --- The data: written in pieces (numpy never holds the split), zip64, stored. ---
start=$(t)
"$python" - "$work" "$gib" "$width" "$table" <<'EOF'
import sys, zipfile, numpy as np
work, gib, width, table = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
rng_w = np.random.default_rng(1234)
w = rng_w.standard_normal((16, 10)).astype(np.float32)

def write(path, n, seed):
    rng = np.random.default_rng(seed)
    step = max(1, (64 << 20) // (width * 4))
    ys = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (n, width)})
            for i in range(0, n, step):
                x = rng.standard_normal((min(step, n - i), width), dtype=np.float32)
                ys.append(np.argmax(x[:, :16] @ w, axis=1).astype(np.int32))
                f.write(x.tobytes())
        with z.open("y.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array(f, np.concatenate(ys))

def write_csv(path, n, seed):
    rng = np.random.default_rng(seed)
    step = max(1, (16 << 20) // (width * 4))
    with open(path, "w") as f:
        f.write(",".join(f"f{i}" for i in range(width)) + ",label\n")
        for i in range(0, n, step):
            x = rng.standard_normal((min(step, n - i), width), dtype=np.float32)
            y = np.argmax(x[:, :16] @ w, axis=1)
            text = np.char.mod("%.3f", x).astype(object)
            text[rng.random(x.shape) < 0.02] = "NA"
            f.write("\n".join(",".join(row) + f",c{label}" for row, label in zip(text, y)) + "\n")

n = int(gib * (1 << 30) // (width * 4))
if table:
    write_csv(work + "/train.csv", n, 1)
    write_csv(work + "/test.csv", 20000, 2)
else:
    write(work + "/train.npz", n, 1)
    write(work + "/test.npz", 20000, 2)
print("rows", n)
EOF
ext=$([ "$table" = 1 ] && echo csv || echo npz)
type=$([ "$table" = 1 ] && echo text/csv || echo application/x-npz)
echo "data written in $(secs "$start" "$(t)") s: $(du -h "$work/train.$ext" | cut -f1) train, $(du -h "$work/test.$ext" | cut -f1) test"

# --- A cluster, each process in its own limited group once it is up (before any data). ---
export AUTH=0 PSTRAIN_CLUSTER_SECRET_FILE=none PSTRAIN_MAX_UPLOAD_BYTES=$(( (${gib%.*} * 3 + 2) << 30 ))
url=http://127.0.0.1:$((port + 1))
mkdir -p "$work/cluster/datasets"
LOCAL_CLUSTER_DIR=$work/cluster RPC_PORT=$port HTTP_PORT=$((port + 1)) SERVERS=1 WORKERS=2 WORKER_THREADS=1 \
  WORKER_FLAGS="--data-from $data_from" \
  BUILD_DIR=$build PSTRAIN_DATA_DIR=$work/cluster/datasets "$ROOT/deploy/local-cluster.sh" up >"$work/up.log" 2>&1 ||
  { cat "$work/up.log"; exit 1; }
mkdir -p "$group"
limit() {  # name pid
  mkdir -p "$group/$1"
  echo $((limit_mib << 20)) >"$group/$1/memory.limit_in_bytes"
  echo "$2" >"$group/$1/cgroup.procs"
}
names=(coordinator server-0 worker-0 worker-1)
for name in "${names[@]}"; do limit "$name" "$(cat "$work/cluster/$name.pid")"; done

# --- Upload. ---
for split in train test; do
  start=$(t)
  status=$(curl -s -o "$work/$split.answer" -w '%{http_code}' -H "Content-Type: $type" -T "$work/$split.$ext" \
    "$url/v1/datasets/big/$split")
  end=$(t)
  [ "$status" = 201 ] || { echo "upload of $split: HTTP $status: $(head -c 400 "$work/$split.answer")" >&2; exit 1; }
  bytes=$(stat -c %s "$work/$split.$ext")
  echo "upload $split: $bytes bytes in $(secs "$start" "$end") s = $("$python" -c "print(round($bytes / 1e6 / ($end - $start), 1))") MB/s"
done
rm -f "$work/train.$ext"  # the stored shards are what the runs read
coordinator_pid=$(cat "$work/cluster/coordinator.pid")
echo "coordinator after the uploads: RSS $(awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$coordinator_pid/status") MiB," \
  "peak $(awk '/^VmHWM:/ {print int($2 / 1024)}' "/proc/$coordinator_pid/status") MiB"

# --- One epoch, sync, 2 workers; evaluated on the test split. ---
# (A table's features: each column standardized and its missing indicator, 2 x WIDTH.)
"$python" - "$work/spec.json" "$(( table == 1 ? 2 * width : width ))" <<'EOF'
import json, sys
json.dump({
    "name": "big-mlp",
    "dataset": {"name": "big", "shuffle_seed": 7},
    "model": {"input_shape": [int(sys.argv[2])], "seed": 7, "layers": [
        {"type": "dense", "units": 64, "activation": "relu"}, {"type": "dense", "units": 10}]},
    "loss": "sparse_softmax_cross_entropy",
    "optimizer": {"type": "adam", "learning_rate": 0.001},
    "training": {"epochs": 1, "global_batch_size": 256, "workers": 2, "servers": 1, "mode": "sync"},
}, open(sys.argv[1], "w"))
EOF
start=$(t)
curl -s -o "$work/submit.json" -H 'Content-Type: application/json' --data @"$work/spec.json" "$url/v1/jobs"
job=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/submit.json") ||
  { echo "submit failed: $(head -c 600 "$work/submit.json")" >&2; exit 1; }
while :; do
  state=$(curl -sf "$url/v1/jobs/$job" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case $state in SUCCEEDED | FAILED | CANCELLED) break ;; esac
  "$python" -c "import sys; sys.exit(0 if $(t) - $start < $timeout else 1)" ||
    { echo "big_data_bench: job $job still $state after $timeout s" >&2; tail -5 "$work"/cluster/*.log >&2; exit 1; }
  sleep 1
done
end=$(t)
curl -sf "$url/v1/jobs/$job" >"$work/job.json"
"$python" - "$work/job.json" "$(secs "$start" "$end")" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"job {j['id']}: {j['state']} in {sys.argv[2]} s (submit to end); test accuracy {j.get('test_accuracy')}; "
      f"samples/s {j.get('samples_per_second')}")
for n in j.get("notes", [])[-3:]: print("  note:", n)
EOF
echo "peak memory per process (limit $limit_mib MiB each):"
for name in "${names[@]}"; do
  pid=$(cat "$work/cluster/$name.pid")
  hwm=$(awk '/^VmHWM:/ {print int($2 / 1024)}' "/proc/$pid/status")
  echo "  $name: RSS peak $hwm MiB; group peak $(( $(cat "$group/$name/memory.max_usage_in_bytes") >> 20 )) MiB (page cache included), limit hit $(cat "$group/$name/memory.failcnt") times"
done
failed=0
oom_kills() { awk '/^oom_kill / {print $2}' "$group/$1/memory.oom_control"; }
for name in "${names[@]}"; do
  [ "$(oom_kills "$name")" = 0 ] || { echo "big_data_bench: FAIL: the OOM killer killed in $name's group" >&2; failed=1; }
done
[ "$state" = SUCCEEDED ] || { echo "big_data_bench: FAIL: job $job ended $state" >&2; failed=1; }
LOCAL_CLUSTER_DIR=$work/cluster "$ROOT/deploy/local-cluster.sh" down >/dev/null 2>&1 || true
[ "$failed" = 0 ] || exit 1

# --- The standalone trainer on the same stored dataset, limited the same way. ---
if [ "$trainer" = 1 ]; then
  mkdir -p "$group/trainer"
  echo $((limit_mib << 20)) >"$group/trainer/memory.limit_in_bytes"
  start=$(t)
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$group/trainer" \
    "$build/worker/pstrain-train" --spec "$work/spec.json" --data-dir "$work/cluster/datasets" --threads 2 --servers 1 \
    >"$work/trainer.log" 2>&1 & pid=$!
  hwm=0
  while kill -0 "$pid" 2>/dev/null; do
    now=$(awk '/^VmHWM:/ {print int($2 / 1024)}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "${now:-0}" -gt "$hwm" ] && hwm=$now
    sleep 1
  done
  wait "$pid" || { tail -20 "$work/trainer.log"; exit 1; }
  echo "pstrain-train: $(secs "$start" "$(t)") s; RSS peak $hwm MiB; group peak $(( $(cat "$group/trainer/memory.max_usage_in_bytes") >> 20 )) MiB, limit hit $(cat "$group/trainer/memory.failcnt") times"
  grep -E "^epoch|^RESULT" "$work/trainer.log" | tail -2 | cut -c1-300 | sed 's/^/  /'
  [ "$(oom_kills trainer)" = 0 ] || { echo "big_data_bench: FAIL: the OOM killer killed in the trainer's group" >&2; exit 1; }
  "$python" - "$work/job.json" "$work/trainer.log" <<'EOF'
import json, sys
cluster = json.load(open(sys.argv[1]))["test_accuracy"]
result = [l for l in open(sys.argv[2]) if l.startswith("RESULT ")]
trainer = json.loads(result[-1][len("RESULT "):])["test_accuracy"][-1] if result else None
if trainer is None or abs(trainer - cluster) > 5e-7:  # the trainer prints 6 significant digits
    sys.exit(f"big_data_bench: FAIL: the trainer's test accuracy {trainer} is not the cluster job's {cluster}")
print(f"the trainer's test accuracy equals the cluster job's: {cluster}")
EOF
fi
