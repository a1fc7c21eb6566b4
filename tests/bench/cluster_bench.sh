#!/usr/bin/env bash
# cluster_bench.sh — distributed training throughput of pstrain next to PyTorch's distributed
# baselines, and gradient-exchange throughput next to loopback TCP bandwidth, in one run on one
# machine. Job: the MNIST MLP 784-700-500-10, Adam, global batch 128, mnist10k (deploy/jobs/mnist-mlp.json).
#
# Training (each config once per repeat, repeats interleaved: r1 of every config, then r2, ...):
#   pstrain distributed  1 worker x 1 server and 2 workers x 2 servers, each in sync and async mode
#                        (deploy/local-cluster.sh run, 1 compute thread per worker), and sync 2 x 2
#                        with --exchange=factored (without the forward on the servers: what it is worth)
#   pstrain standalone   pstrain-train --threads 1 and --threads 2 (--parallelism batch)
#   PyTorch              ddp_mlp.py (2 x 1 thread), rpc_ps_mlp.py --mode sync / --mode async (1 PS + 2 trainers)
# Every implementation runs --epochs epochs. samples/s of a run = median of its per-epoch figures
# without epoch 1 (warm-up), taken from the per-epoch lines each program prints (the same rule for
# all; with --epochs 1 epoch 1 is all there is). The table shows the median over repeats.
#
# Network (before the training runs): iperf3 over 127.0.0.1, one stream, --net-seconds (also
# --bidir, for reference); then pstrain-exchange-bench (build/tests) against a pstrain-server
# started here: pushes + pulls of the whole MLP (3.62 MB each way per step), 1 client, then 2.
#
# Setup once (root): tests/bench/setup-pytorch.sh; iperf3 (installed here with apt-get when
# missing and running as root). Binaries: an existing build in $PSTRAIN_BUILD_DIR, including the
# pstrain-exchange-bench target.
# Usage: tests/bench/cluster_bench.sh [--repeats N] [--epochs E] [--net-seconds S] [--quick]
#   --repeats N      runs per config (default 3)
#   --epochs E       epochs per training run, ours and PyTorch (default 5)
#   --net-seconds S  duration of each iperf3 / exchange measurement (default 5)
#   --quick          smoke run: 1 repeat, 2 epochs (one timed epoch after warm-up)
# Env: PSTRAIN_DATA_DIR (default <repo>/../shared/data), PSTRAIN_BUILD_DIR (default <repo>/build; must
#      be inside the repository for local-cluster.sh), PYTORCH_BENCH_DIR (default /work/shared/bench/pytorch).
#      Logs of every run (and every cluster's node logs) are kept in a temp dir.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CMDLINE="$(printf '%q ' "$0" "$@")"
REPEATS=3 EPOCHS=5 NET_SECONDS=5 QUICK=0
while (($#)); do
  case $1 in
    --repeats) REPEATS=${2:?--repeats needs a value}; shift 2 ;;
    --epochs) EPOCHS=${2:?--epochs needs a value}; shift 2 ;;
    --net-seconds) NET_SECONDS=${2:?--net-seconds needs a value}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $REPEATS =~ ^[1-9][0-9]*$ && $EPOCHS =~ ^[1-9][0-9]*$ && $NET_SECONDS =~ ^[1-9][0-9]*$ ]] ||
  { echo "cluster_bench.sh: --repeats/--epochs/--net-seconds must be positive integers" >&2; exit 2; }
((QUICK)) && { REPEATS=1; EPOCHS=2; }

PY=/usr/bin/python3
DATA=${PSTRAIN_DATA_DIR:-$ROOT/../shared/data}
BUILD=$(cd "${PSTRAIN_BUILD_DIR:-$ROOT/build}" 2>/dev/null && pwd) || { echo "cluster_bench.sh: build dir not found" >&2; exit 1; }
TRAIN=$BUILD/worker/pstrain-train
SERVER=$BUILD/server/pstrain-server
EXCHANGE=$BUILD/tests/pstrain-exchange-bench
PT_DIR=${PYTORCH_BENCH_DIR:-/work/shared/bench/pytorch}
die() { echo "cluster_bench.sh: $*" >&2; exit 1; }
for b in "$TRAIN" "$SERVER" "$BUILD/coordinator/pstrain-coordinator" "$BUILD/worker/pstrain-worker"; do
  [[ -x $b ]] || die "$b not found: build the project first"
done
[[ -x $EXCHANGE ]] || die "$EXCHANGE not found: ninja -C $BUILD pstrain-exchange-bench"
[[ $BUILD == "$ROOT"/* ]] || die "PSTRAIN_BUILD_DIR must be inside $ROOT (deploy/local-cluster.sh takes it relative)"
[[ -d $DATA ]] || die "data dir $DATA not found (set PSTRAIN_DATA_DIR)"
DATA=$(cd "$DATA" && pwd)
[[ -f $PT_DIR/ddp_mlp.py && -f $PT_DIR/rpc_ps_mlp.py && -f $PT_DIR/openblas_env.sh ]] || die "PyTorch baselines not found in $PT_DIR"
[[ -x $PY ]] || die "$PY not found"
if ! command -v iperf3 >/dev/null; then
  ((EUID == 0)) || die "iperf3 not found: apt-get update && apt-get install -y iperf3 (as root)"
  echo "cluster_bench.sh: installing iperf3 (apt-get)" >&2
  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y iperf3; } >/dev/null || die "could not install iperf3"
fi

# PyTorch runs get OpenBLAS from /opt via openblas_env.sh; ours keeps its own environment.
# shellcheck disable=SC1091
pt() { (. "$PT_DIR/openblas_env.sh" && cd "$PT_DIR" && ANCHOR_DATA=$DATA "$PY" "$@"); }
PT_BLAS=$(pt -c 'import torch; a = torch.randn(64, 64); a @ a
print(" ".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libopenblas" in l or "libblas" in l})))' 2>/dev/null) ||
  die "PyTorch is not installed for $PY: run (as root) $ROOT/tests/bench/setup-pytorch.sh"
[[ $PT_BLAS == *anchors-openblas* ]] || die "PyTorch does not load /opt/anchors-openblas (got: ${PT_BLAS:-none}): run tests/bench/setup-pytorch.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cluster_bench.XXXXXX")
RESULTS=$WORK/results.tsv
: >"$RESULTS"

# Processes this script starts outside the runs (iperf3 server, pstrain-server): stopped on exit.
BG_PIDS=()
cleanup() { for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
stop_bg() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call

# spec MODE WORKERS SERVERS OUT: the MLP job with these training fields and --epochs.
spec() {
  "$PY" - "$ROOT/deploy/jobs/mnist-mlp.json" "$@" "$EPOCHS" <<'EOF'
import json, sys
src, mode, workers, servers, out, epochs = sys.argv[1:]
s = json.load(open(src))
s["training"].update(mode=mode, workers=int(workers), servers=int(servers), epochs=int(epochs))
json.dump(s, open(out, "w"), indent=1)
EOF
}
for mode in sync async; do
  spec $mode 1 1 "$WORK/mlp-$mode-1x1.json"
  spec $mode 2 2 "$WORK/mlp-$mode-2x2.json"
done
spec sync 1 1 "$WORK/mlp-standalone.json"  # pstrain-train ignores the distribution fields

# parse KIND LOG -> "samples_per_s accuracy epochs_used": median per-epoch samples/s without
# epoch 1, and the final test accuracy. KIND: cluster (coordinator lines), train (pstrain-train),
# ddp, rpc (PyTorch scripts, one run each).
parse() {
  "$PY" - "$1" "$2" <<'EOF'
import json, re, statistics, sys
kind, log = sys.argv[1], sys.argv[2]
text = open(log).read()
if kind in ("cluster", "train"):
    eps = [(int(e), float(s)) for e, s in re.findall(r"^epoch (\d+):.*\|\s*([\d.]+) samples/s", text, re.M)]
else:
    eps = [(int(e), float(s)) for e, s in re.findall(r"run \d+ ep (\d+): [\d.]+s\s+([\d.]+) samples/s", text)]
if not eps: sys.exit(f"no per-epoch lines in {log}")
timed = [s for e, s in eps if e > 1] or [s for e, s in eps]
if kind == "cluster":
    m = re.search(r"^final test accuracy: ([\d.]+)", text, re.M)
    if not m: sys.exit(f"no final accuracy in {log}")
    acc = float(m.group(1))
else:
    lines = [l for l in text.splitlines() if l.startswith("RESULT ")]
    if not lines: sys.exit(f"no RESULT line in {log}")
    r = json.loads(lines[-1][len("RESULT "):])
    if kind == "train": acc = r["final_test_accuracy"]
    elif kind == "ddp": acc = r["test_acc_by_run"][0][-1]
    else: acc = r["test_acc_by_run(ep1..N, PS final)"][0][-1]  # the PS's weights after the run
print(f"{statistics.median(timed):.1f} {acc:.4f} {len(timed)}")
EOF
}

# run CONFIG REP KIND CMD...: run once, log, append "config rep samples/s acc epochs seconds" to results.tsv
run() {
  local config=$1 rep=$2 kind=$3; shift 3
  local log=$WORK/$config-r$rep.log t0=$SECONDS
  "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$config failed (log: $log)"; }
  local res sps acc n; res=$(parse "$kind" "$log") || die "cannot parse $log"; read -r sps acc n <<<"$res"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$config" "$rep" "$sps" "$acc" "$n" "$((SECONDS - t0))" >>"$RESULTS"
  printf '  %-18s run %s: %9s samples/s, acc %s (%ss, load avg %s)\n' "$config" "$rep" "$sps" "$acc" "$((SECONDS - t0))" \
    "$(cut -d' ' -f1 /proc/loadavg)" >&2
}

cluster() {  # MODE WORKERS SERVERS REP [WORKER_FLAGS]
  local dir=$WORK/cluster-$1-$2x$3-r$4${5:+-flags}
  LOCAL_CLUSTER_DIR=$dir RPC_PORT=$(free_port) HTTP_PORT=$(free_port) SERVERS=$3 WORKERS=$2 WORKER_THREADS=1 WORKER_FLAGS=${5:-} \
    BUILD_DIR=${BUILD#"$ROOT"/} PSTRAIN_DATA_DIR=$DATA \
    timeout -k 10 600 "$ROOT/deploy/local-cluster.sh" run "$WORK/mlp-$1-$2x$3.json"
}

CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
echo "command: $CMDLINE"
echo "machine: nproc=$(nproc), CPU: ${CPU:-unknown}, $(awk '/MemTotal/ {printf "%.1f GB RAM", $2 / 1048576}' /proc/meminfo), kernel $(uname -r), load avg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pstrain: $BUILD (git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', tree dirty'); pstrain-worker built $(date -r "$BUILD/worker/pstrain-worker" '+%F %T'), pstrain-train $(date -r "$TRAIN" '+%F %T'), pstrain-server $(date -r "$SERVER" '+%F %T'))"
echo "cluster transport: $([[ ${PSTRAIN_SERVER_SAME_HOST_SOCKET:-1} =~ ^(0|false|no)$ ]] && echo 'loopback TCP (PSTRAIN_SERVER_SAME_HOST_SOCKET=0)' || echo 'same-host sockets (the default; PSTRAIN_SERVER_SAME_HOST_SOCKET=0 for loopback TCP)')"
echo "pytorch: $(pt -c 'import torch; print(torch.__version__)' 2>/dev/null), BLAS $PT_BLAS; $(iperf3 --version | head -n1)"
echo "job: MLP 784-700-500-10, Adam, global batch 128, mnist10k (5,002 train examples); $EPOCHS epochs for every implementation; repeats $REPEATS$( ((QUICK)) && echo ' (--quick)')"
echo "data: $DATA"
env | grep -E '^(OPENBLAS_|OMP_|GOTO|MKL_)' | sed 's/^/env: /' || true
echo "logs: $WORK"
echo

START=$SECONDS

# ---- Network: loopback TCP (iperf3), then pstrain's gradient exchange -------------------------
echo "network measurements ($NET_SECONDS s each) ..." >&2
IPERF_PORT=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$WORK/iperf3-server.log" 2>&1 &
IPERF_PID=$!; BG_PIDS+=("$IPERF_PID")
sleep 0.5
iperf_gbps() {  # JSON on stdin -> received GB/s (1e9 bytes/s) summed over directions
  "$PY" -c 'import json, sys
e = json.load(sys.stdin)["end"]
b = e["sum_received"]["bits_per_second"] + e.get("sum_received_bidir_reverse", {}).get("bits_per_second", 0)
print(f"{b / 8e9:.3f}")'
}
iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -t "$NET_SECONDS" -P 1 -J >"$WORK/iperf3-client.json" 2>&1 ||
  die "iperf3 client failed: $(head -c 400 "$WORK/iperf3-client.json")"
IPERF_GBPS=$(iperf_gbps <"$WORK/iperf3-client.json")
iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -t "$NET_SECONDS" -P 1 --bidir -J >"$WORK/iperf3-client-bidir.json" 2>&1 ||
  die "iperf3 --bidir client failed: $(head -c 400 "$WORK/iperf3-client-bidir.json")"
IPERF_BIDIR_GBPS=$(iperf_gbps <"$WORK/iperf3-client-bidir.json")
stop_bg "$IPERF_PID"
echo "  iperf3: $IPERF_GBPS GB/s one way, $IPERF_BIDIR_GBPS GB/s both ways (--bidir)" >&2

"$SERVER" --listen 127.0.0.1:0 --coordinator 127.0.0.1:1 --name exchange-bench --data-dir "$WORK/exchange-server-data" --log-level warning >"$WORK/exchange-server.log" 2>&1 &
SERVER_PID=$!; BG_PIDS+=("$SERVER_PID")
for _ in $(seq 100); do grep -q PSTRAIN_READY "$WORK/exchange-server.log" && break; sleep 0.1; done
SERVER_PORT=$(sed -n 's/.*PSTRAIN_READY role=server port=\([0-9]*\).*/\1/p' "$WORK/exchange-server.log")
[[ -n $SERVER_PORT ]] || die "pstrain-server did not start: $(tail -n 5 "$WORK/exchange-server.log")"
exchange() {  # CLIENTS -> "gb_per_second steps_per_second ms_per_step"
  local log=$WORK/exchange-c$1.log
  "$EXCHANGE" --server "127.0.0.1:$SERVER_PORT" --spec "$ROOT/deploy/jobs/mnist-mlp.json" --seconds "$NET_SECONDS" --clients "$1" >"$log" 2>&1 ||
    { tail -n 20 "$log" >&2; die "pstrain-exchange-bench failed (log: $log)"; }
  "$PY" -c 'import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.startswith("RESULT ")][-1][7:])
print("%.3f %.1f %.2f" % (r["gb_per_second"], r["steps_per_second"], r["ms_per_step"]))' "$log"
}
read -r EX1_GBPS EX1_STEPS EX1_MS <<<"$(exchange 1)"
read -r EX2_GBPS EX2_STEPS EX2_MS <<<"$(exchange 2)"
stop_bg "$SERVER_PID"
echo "  exchange: $EX1_GBPS GB/s (1 client), $EX2_GBPS GB/s (2 clients)" >&2

# ---- Training ----------------------------------------------------------------------------------
echo "training runs ..." >&2
for ((rep = 1; rep <= REPEATS; rep++)); do
  for mode in sync async; do
    run "pstrain-$mode-1w1s" $rep cluster cluster $mode 1 1 $rep
    run "pstrain-$mode-2w2s" $rep cluster cluster $mode 2 2 $rep
  done
  # The same without factored pushes (session 3's exchange): what they are worth, in this run.
  run pstrain-sync-2w2s-factored $rep cluster cluster sync 2 2 $rep --exchange=factored
  run standalone-t1 $rep train "$TRAIN" --spec "$WORK/mlp-standalone.json" --data-dir "$DATA" --threads 1 --parallelism batch
  run standalone-t2 $rep train "$TRAIN" --spec "$WORK/mlp-standalone.json" --data-dir "$DATA" --threads 2 --parallelism batch
  run torch-ddp $rep ddp pt ddp_mlp.py --epochs "$EPOCHS" --repeats 1 --port "$(free_port)"
  run torch-rpc-sync $rep rpc pt rpc_ps_mlp.py --mode sync --epochs "$EPOCHS" --repeats 1 --port "$(free_port)"
  run torch-rpc-async $rep rpc pt rpc_ps_mlp.py --mode async --epochs "$EPOCHS" --repeats 1 --port "$(free_port)"
done
echo >&2

"$PY" - "$RESULTS" "$EPOCHS" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    config, rep, sps, acc, n, secs = line.rstrip("\n").split("\t")
    rows[config].append((float(sps), float(acc), int(n)))
med = {c: statistics.median(x[0] for x in v) for c, v in rows.items()}
acc = {c: statistics.median(x[1] for x in v) for c, v in rows.items()}
names = {
    "pstrain-sync-1w1s": ("pstrain sync, 1 worker x 1 server", "sync"),
    "pstrain-sync-2w2s": ("pstrain sync, 2 workers x 2 servers", "sync"),
    "pstrain-async-1w1s": ("pstrain async, 1 worker x 1 server", "async"),
    "pstrain-async-2w2s": ("pstrain async, 2 workers x 2 servers", "async"),
    "pstrain-sync-2w2s-factored": ("pstrain sync, 2 x 2, --exchange=factored", "sync"),
    "standalone-t1": ("pstrain-train, 1 thread", None),
    "standalone-t2": ("pstrain-train, 2 threads", None),
    "torch-ddp": ("PyTorch DDP gloo, 2 x 1 thread", None),
    "torch-rpc-sync": ("PyTorch RPC-PS sync, 1 PS + 2 trainers", "sync"),
    "torch-rpc-async": ("PyTorch RPC-PS async, 1 PS + 2 trainers", "async"),
}
ratio = lambda c, ref: f"{med[c] / med[ref]:.2f}" if ref in med and med[ref] > 0 else "-"
print("| config | samples/s (median) | final test acc | vs DDP | vs RPC-PS same mode | vs pstrain-train 1 thread |")
print("|---|---|---|---|---|---|")
for c, (name, mode) in names.items():
    if c not in med: continue
    rpc = ratio(c, f"torch-rpc-{mode}") if mode else "-"
    print(f"| {name} | {med[c]:,.0f} | {acc[c]:.4f} | {ratio(c, 'torch-ddp')} | {rpc} | {ratio(c, 'standalone-t1')} |")
runs = len(next(iter(rows.values())))
timed = min(x[2] for v in rows.values() for x in v)
print(f"\n{sys.argv[2]} epochs per run, {runs} run(s) per config; samples/s of a run = median of its per-epoch figures "
      f"without epoch 1 ({timed} epoch(s) timed){' — warm-up included, not for comparison' if int(sys.argv[2]) == 1 else ''}; "
      "ratios = row / reference samples/s. pstrain distributed: the coordinator's epoch line (sum of the workers' own "
      "rates, training steps only); PyTorch: its epoch lines (whole cluster, training only); accuracy: final test "
      "accuracy (RPC-PS: the PS's weights after the run).")
EOF
echo
cat <<EOF
| exchange | GB/s | steps/s | ms/step | vs iperf3 one stream |
|---|---|---|---|---|
| iperf3 loopback, 1 stream, one way | $IPERF_GBPS | | | 1.00 |
| iperf3 loopback, 1 stream, --bidir (both ways summed) | $IPERF_BIDIR_GBPS | | | $("$PY" -c "print(f'{$IPERF_BIDIR_GBPS / $IPERF_GBPS:.2f}')") |
| pstrain push+pull, 1 client, 1 server | $EX1_GBPS | $EX1_STEPS | $EX1_MS | $("$PY" -c "print(f'{$EX1_GBPS / $IPERF_GBPS:.2f}')") |
| pstrain push+pull, 2 clients, 1 server | $EX2_GBPS | $EX2_STEPS | $EX2_MS | $("$PY" -c "print(f'{$EX2_GBPS / $IPERF_GBPS:.2f}')") |

exchange GB/s vs iperf3 GB/s (ratio): $EX1_GBPS vs $IPERF_GBPS ($("$PY" -c "print(f'{$EX1_GBPS / $IPERF_GBPS:.2f}')"))
GB = 1e9 bytes. Exchange: pstrain-exchange-bench, $NET_SECONDS s after 5 warm-up steps: every step pushes every chunk of
the MLP (3.62 MB of zero gradients; sync job, the clients are one step's slices) and copies the 3.62 MB of values
from the replies; GB/s counts bytes pushed + pulled; steps/s summed over clients, ms/step per client. iperf3: one
TCP stream over 127.0.0.1 for $NET_SECONDS s, receiver's rate.
EOF
echo "total wall time: $((SECONDS - START)) s; load avg at end: $(cut -d' ' -f1-3 /proc/loadavg)"
