#!/usr/bin/env bash
# Soak test of recovery (not in CI: minutes): runs the MLP job (sync or --mode async, 2 servers,
# 2 workers, save_freq 10) again and again, each time killing one random node (coordinator, a server or a
# worker) with SIGKILL at a random moment and restarting it, and reports: trials, jobs finished,
# steps replayed (max, mean), and the final accuracy against a run without faults.
#
# Usage: tests/bench/soak.sh [--trials N] [--seed S] [--mode sync|async]
#        (moments and victims come from the seed; async runs are not deterministic, so their
#        accuracy varies a little even without faults)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin="$repo/build"
trials=10 seed=1 mode=sync
while [ $# -gt 0 ]; do
  case $1 in
    --trials) trials=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    *) echo "usage: $0 [--trials N] [--seed S] [--mode sync|async]" >&2; exit 2 ;;
  esac
done
data=${PSTRAIN_DATA_DIR:-$repo/../shared/data}
work=$(mktemp -d /tmp/pstrain-soak.XXXXXX)
RANDOM=$seed
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
spec="$work/job.json"
# 8 epochs (320 steps): several seconds of training, so a random moment in it falls mid-run.
python3 -c "import json; s=json.load(open('$repo/deploy/jobs/mnist-mlp.json')); s['backup']={'save_freq':10}; s['training']['mode']='$mode'; s['training']['epochs']=8; json.dump(s,open('$spec','w'))"

pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# start NAME DIR COMMAND...: runs a node, records its pid in DIR/NAME.pid
start() {
  local name=$1 dir=$2; shift 2
  "$@" >>"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  pids+=($!)
}

run_trial() {  # trial-number victim(or "none") -> prints "finished replayed accuracy"
  local t=$1 victim=$2 dir="$work/trial-$1"
  mkdir -p "$dir"
  local rpc http
  rpc=$(free_port); http=$(free_port)
  local coord=("$bin/coordinator/pstrain-coordinator" --listen "127.0.0.1:$rpc" --http "127.0.0.1:$http"
               --state-dir "$dir/state" --data-dir "$data" --job "$spec" --heartbeat-ms 200 --dead-after-ms 1500)
  start coordinator "$dir" "${coord[@]}"
  sleep 0.3
  for i in 0 1; do
    start "server-$i" "$dir" "$bin/server/pstrain-server" --listen 127.0.0.1:0 --coordinator "127.0.0.1:$rpc" \
      --name "server-$i" --data-dir "$dir/server-$i-data"
    start "worker-$i" "$dir" "$bin/worker/pstrain-worker" --coordinator "127.0.0.1:$rpc" --name "worker-$i"
  done
  local url="http://127.0.0.1:$http/v1/jobs/cli-job" state="" steps=0 deadline=$((SECONDS + 180))
  if [ "$victim" != none ]; then
    # A random moment in the first ~2 s of training, counted from its first steps (the job
    # trains for about 3 s here; before, counting from the start, a fast run could be over first).
    while [ $SECONDS -lt $deadline ]; do
      steps=$(curl -sf "$url" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])' 2>/dev/null || echo 0)
      [ "${steps:-0}" -gt 0 ] && break
      sleep 0.05
    done
    local delay_ms=$((RANDOM % 2000))
    sleep "$(python3 -c "print($delay_ms/1000)")"
    kill -9 "$(cat "$dir/$victim.pid")" 2>/dev/null || true
    sleep 0.3
    case $victim in
      coordinator) start coordinator "$dir" "${coord[@]}" ;;
      server-*) start "$victim" "$dir" "$bin/server/pstrain-server" --listen 127.0.0.1:0 --coordinator "127.0.0.1:$rpc" \
                  --name "$victim" --data-dir "$dir/$victim-data" ;;
      worker-*) start "$victim" "$dir" "$bin/worker/pstrain-worker" --coordinator "127.0.0.1:$rpc" --name "$victim" ;;
    esac
  fi
  while [ $SECONDS -lt $deadline ]; do
    state=$(curl -sf "$url" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true)
    case $state in SUCCEEDED|FAILED|CANCELLED) break ;; esac
    sleep 0.5
  done
  local summary
  summary=$(curl -sf "$url" | python3 -c '
import json, sys
j = json.load(sys.stdin)
r = j["recoveries"]["replayed_steps"]
print(j["state"], max(r) if r else 0, j["test_accuracy"] if j["test_accuracy"] is not None else "nan")' 2>/dev/null || echo "UNREACHABLE 0 nan")
  cleanup; pids=()
  echo "$summary"
}

echo "soak: $trials trials, seed $seed, mode $mode, logs in $work" >&2
baseline=$(run_trial 0 none)
base_acc=$(echo "$baseline" | awk '{print $3}')
echo "no-fault run: $baseline" >&2
victims=(coordinator server-0 server-1 worker-0 worker-1)
: >"$work/results"
for t in $(seq "$trials"); do
  victim=${victims[$((RANDOM % ${#victims[@]}))]}
  result=$(run_trial "$t" "$victim")
  echo "trial $t: killed $victim -> $result" >&2
  echo "$victim $result" >>"$work/results"
done
python3 - "$work/results" "$base_acc" "$trials" "$seed" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
base = float(sys.argv[2])
done = [r for r in rows if r[1] == "SUCCEEDED"]
replayed = [int(r[2]) for r in rows]
acc = [float(r[3]) for r in done]
print()
print(f"| trials | finished | steps replayed (max / mean) | accuracy spread vs no-fault ({base:.4f}) |")
print("|---|---|---|---|")
spread = max(abs(a - base) for a in acc) * 100 if acc else float("nan")
print(f"| {len(rows)} (seed {sys.argv[4]}) | {len(done)} ({100*len(done)/len(rows):.0f}%) | "
      f"{max(replayed)} / {sum(replayed)/len(replayed):.1f} | {spread:.2f} points max |")
PY
