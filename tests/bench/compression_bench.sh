#!/usr/bin/env bash
# compression_bench.sh — training.compression (none, fp16, bf16, topk, powersgd) on a job's spec (default
# the MNIST MLP 784-700-500-10, deploy/jobs/mnist-mlp.json: Adam, global batch 128, mnist10k;
# --spec deploy/jobs/fashion-cnn.json for the Fashion CNN), 2 workers x 1 server in sync
# mode, with each worker's egress uncapped or limited by tc tbf: bytes per step, samples/s and
# test accuracy, one line per run.
#
# Network: three namespaces of our own joined by a bridge in the root namespace (the layout of
# the multi-host test bed, tests/netbed/netbed.sh on its branch, with our own names and range):
#   psc-s  coordinator and server   127.12.1.1/16
#   psc-w0 worker 0                 127.12.2.1/16
#   psc-w1 worker 1                 127.12.2.2/16
# on veth pairs psc-s/psc-w0/psc-w1 (root side) <-> eth0, bridge psc-br; loopback-range addresses
# only (route_localnet=1), so nothing can leave the machine. A rate limits each worker's eth0
# egress (its pushes; its pulls come at the server's speed, so the replies are uncapped: the
# issue's "workers' links capped" is both ways; cap psc-s too with --cap-server, or each worker's
# link both ways with --cap-both: then also the root side of its veth, the worker's ingress).
# Ports 19601 (RPC) and 19602 (HTTP) inside psc-s. Needs root, ip and tc.
#
# Usage: tests/bench/compression_bench.sh [--spec FILE] [--epochs E] [--rates "off 1gbit 100mbit"]
#                                         [--kinds "none none-dense fp16 bf16 topk powersgd"] [--fraction F]
#                                         [--rank R] [--cap-server] [--cap-both]
#   kinds: none (the workers' default exchange: row-sparse replies, factored pushes, forward on
#   the servers), none-dense (none with --exchange=dense: whole float32 chunks, what fp16 and topk
#   compress), none-f32-kernels (none with --kernel-replies=float32: a mixed_bfloat16 spec's
#   rounded kernels back in float32, where none has them in bfloat16), fp16, bf16 (pushes only),
#   topk (with --fraction, default 0.01), powersgd (with --rank, default 4).
#   The spec's servers, workers, epochs, compression and backup are replaced; the rest (model,
#   dataset, optimizer, batch) is the job's.
#   samples/s: the median of the coordinator's per-epoch figures without epoch 1 (all of them
#   with one epoch); bytes: worker 0's last report (payload bytes pushed / pulled per step);
#   accuracy: the final epoch's test accuracy. Logs in a temp dir (printed).
# Env: PSTRAIN_DATA_DIR (default <repo>/../shared/data), PSTRAIN_BUILD_DIR (default <repo>/build).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SPEC=$ROOT/deploy/jobs/mnist-mlp.json EPOCHS=3 RATES="off 1gbit 100mbit" KINDS="none none-dense fp16 topk" FRACTION=0.01 RANK=4 CAP_SERVER=0 CAP_BOTH=0
while (($#)); do
  case $1 in
    --spec) SPEC=${2:?}; shift 2 ;;
    --epochs) EPOCHS=${2:?}; shift 2 ;;
    --rates) RATES=${2:?}; shift 2 ;;
    --kinds) KINDS=${2:?}; shift 2 ;;
    --fraction) FRACTION=${2:?}; shift 2 ;;
    --rank) RANK=${2:?}; shift 2 ;;
    --cap-server) CAP_SERVER=1; shift ;;
    --cap-both) CAP_BOTH=1; shift ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compression_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
DATA=${PSTRAIN_DATA_DIR:-$ROOT/../shared/data}
BUILD=${PSTRAIN_BUILD_DIR:-$ROOT/build}
[[ $(id -u) -eq 0 ]] || { echo "compression_bench.sh: needs root (network namespaces)" >&2; exit 77; }
for b in coordinator/pstrain-coordinator server/pstrain-server worker/pstrain-worker; do
  [[ -x $BUILD/$b ]] || { echo "compression_bench.sh: $BUILD/$b missing: build it" >&2; exit 1; }
done
[[ -f $SPEC ]] || { echo "compression_bench.sh: no spec file $SPEC" >&2; exit 2; }
WORK=$(mktemp -d /tmp/compression-bench.XXXXXX)
echo "logs in $WORK" >&2

PIDS=()
stop_nodes() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
down() {
  stop_nodes
  local ns
  for ns in psc-s psc-w0 psc-w1; do ip netns del "$ns" 2>/dev/null || true; done
  for l in psc-s psc-w0 psc-w1 psc-br; do ip link del "$l" 2>/dev/null || true; done
}
trap down EXIT

up() {
  down
  ip link add psc-br type bridge
  ip link set psc-br up
  sysctl -qw net.ipv4.conf.psc-br.arp_ignore=8
  local node addr
  for node in s:127.12.1.1 w0:127.12.2.1 w1:127.12.2.2; do
    addr=${node#*:} node=psc-${node%%:*}
    ip netns add "$node"
    ip link add "$node" type veth peer name eth0 netns "$node"
    sysctl -qw "net.ipv4.conf.$node.route_localnet=1" "net.ipv4.conf.$node.arp_ignore=8"
    ip link set "$node" master psc-br up
    ip -n "$node" link set lo up
    ip -n "$node" route del local 127.0.0.0/8 dev lo table local
    ip netns exec "$node" sysctl -qw net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.eth0.route_localnet=1
    ip -n "$node" addr add "$addr/16" dev eth0
    ip -n "$node" link set eth0 up
  done
}

set_rate() {  # ns rate: the namespace's egress
  if [[ $2 == off ]]; then
    ip netns exec "$1" tc qdisc del dev eth0 root 2>/dev/null || true
  else
    ip netns exec "$1" tc qdisc replace dev eth0 root tbf rate "$2" burst 64kb latency 1s
  fi
}

set_ingress_rate() {  # ns rate: the namespace's ingress (the root side of its veth sends into it)
  if [[ $2 == off ]]; then
    tc qdisc del dev "$1" root 2>/dev/null || true
  else
    tc qdisc replace dev "$1" root tbf rate "$2" burst 64kb latency 1s
  fi
}

spec_for() {  # kind -> spec file
  local file=$WORK/spec-$1.json
  /usr/bin/python3 - "$SPEC" "$1" "$EPOCHS" "$FRACTION" "$RANK" >"$file" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
kind, epochs, fraction, rank = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
spec["training"].update({"servers": 1, "workers": 2, "epochs": epochs})
if kind == "topk":
    spec["training"]["compression"] = {"kind": "topk", "fraction": fraction}
elif kind == "powersgd":
    spec["training"]["compression"] = {"kind": "powersgd", "rank": rank}
elif kind not in ("none", "none-dense", "none-f32-kernels"):
    spec["training"]["compression"] = kind
spec["backup"] = {}
print(json.dumps(spec))
EOF
  echo "$file"
}

run_one() {  # kind rate
  local kind=$1 rate=$2 dir=$WORK/$1-$2
  mkdir -p "$dir"
  set_rate psc-w0 "$rate"
  set_rate psc-w1 "$rate"
  ((CAP_SERVER)) && set_rate psc-s "$rate"
  ((CAP_SERVER)) || set_rate psc-s off
  local ingress=off
  ((CAP_BOTH)) && ingress=$rate
  set_ingress_rate psc-w0 "$ingress"
  set_ingress_rate psc-w1 "$ingress"
  ip netns exec psc-s "$BUILD/coordinator/pstrain-coordinator" --listen 127.12.1.1:19601 --http 127.12.1.1:19602 \
    --state-dir "$dir/state" --data-dir "$DATA" --datasets-dir "$dir/datasets" --job "$(spec_for "$kind")" \
    --exit-when-done >"$dir/coordinator.log" 2>&1 &
  local coordinator=$!
  PIDS+=("$coordinator")
  sleep 1
  ip netns exec psc-s "$BUILD/server/pstrain-server" --listen 127.12.1.1:0 --advertise-host 127.12.1.1 \
    --coordinator 127.12.1.1:19601 --name server-0 --data-dir "$dir/server" >"$dir/server.log" 2>&1 &
  PIDS+=($!)
  for w in 0 1; do
    ip netns exec "psc-w$w" "$BUILD/worker/pstrain-worker" --coordinator 127.12.1.1:19601 --name "worker-$w" \
      --threads 1 $([[ $kind == none-dense ]] && echo --exchange=dense) \
      $([[ $kind == none-f32-kernels ]] && echo --kernel-replies=float32) >"$dir/worker-$w.log" 2>&1 &
    PIDS+=($!)
  done
  wait "$coordinator" || echo "compression_bench.sh: $kind $rate: coordinator exit $?" >&2
  stop_nodes
  /usr/bin/python3 - "$dir/coordinator.log" "$kind" "$rate" <<'EOF'
import re, statistics, sys
text = open(sys.argv[1], errors="replace").read()
rates = [float(m) for m in re.findall(r"^epoch \d+: .*\| ([0-9.]+) samples/s", text, re.M)]
acc = re.findall(r"^epoch \d+: .*\| test loss [0-9.]+ accuracy ([0-9.]+)", text, re.M)
w0 = re.findall(r"worker 0: .*? ([0-9]+) B pushed and ([0-9]+) B pulled per step", text)
sps = statistics.median(rates[1:] or rates) if rates else float("nan")
pushed, pulled = (w0[-1] if w0 else ("?", "?"))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {pushed} | {pulled} | {sps:.0f} | {acc[-1] if acc else '?'} |")
EOF
}

up
link=egress; ((CAP_BOTH)) && link="link (both ways)"; ((CAP_SERVER)) && link="$link, server capped too"
echo "| compression | worker $link | B pushed/step (w0) | B pulled/step (w0) | samples/s | test accuracy |"
echo "|---|---|---|---|---|---|"
for rate in $RATES; do
  for kind in $KINDS; do run_one "$kind" "$rate"; done
done
