#!/usr/bin/env bash
# A model of hundreds of MB, distributed, through a server's loss: the TPU guide's CNN
# (deploy/jobs/tpu-cnn.json: 38.4M float32 parameters, 154 MB; with Adam's two slots a server's
# backup of its half is 230 MB) on 2 servers and 2 workers, plus a spare server, all real
# processes on this machine. Backups every --save-freq steps; once the backup at --kill-after is
# complete, one of the job's servers gets SIGKILL and never comes back: the coordinator moves its
# shard to the spare from its replica and the job rolls back to that backup. Then the model is
# downloaded over REST and checked (size, safetensors header).
#
# The spec has no field capping the steps, and one epoch of Fashion-MNIST at batch 200 is 300
# steps of several seconds each on 2 cores: by default the run trains on mnist10k (the same
# 28x28x1 shape, a 5,002-example slice of MNIST), --epochs of 26 steps each (default 2: 51 steps);
# --dataset fashion-mnist --epochs 1 --kill-after 150 is the whole tutorial epoch.
#
# Every process runs on its defaults (issue 33): steps far longer than the dead timeout do not
# make a node look dead, since heartbeats come from a thread of their own.
#
# Reports: steps/s before the kill and after the recovery, the recovery time (kill -> RUNNING
# again, and kill -> back at the step the job had reached), each process's peak RSS (VmHWM,
# sampled every second while it runs), and the model's size.
#
# --model mlp80m: instead of the CNN, an MLP 784-16384-4096-10 (80,015,370 parameters, 320 MB;
# with Adam's two slots 960 MB in all, 480 MB per server), global batch 500 (10 steps an epoch
# of mnist10k). Each step computes 120 GFLOP per worker and moves 320 MB each way, and each backup
# writes 960 MB on the servers and again on the coordinator (replicas): on a shared 2-core machine
# a step can take a minute, so the nodes are declared dead only after 120 s and a server move
# and the final checkpoint (which share --server-move-timeout-ms) get 10 minutes. The final
# checkpoint (960 MB, with the slots) is always made; with --checkpoint-keep K > 0 (default 1)
# every backup becomes one too. Then also reports each server's backup write and replica
# send times, the checkpoint download (with the optimizer's slots) and each process's peak RSS
# against the bytes of parameters and optimizer slots it holds.
#
# Usage: tests/bench/big_model.sh [--model tpu-cnn|mlp80m] [--epochs N] [--save-freq S]
#                                 [--kill-after STEP] [--checkpoint-keep K] [--dataset NAME] [--keep]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BUILD_DIR:-$repo/build}
model=tpu-cnn epochs="" save_freq="" kill_after="" checkpoint_keep="" dataset=mnist10k keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --save-freq) save_freq=$2; shift 2 ;;
    --kill-after) kill_after=$2; shift 2 ;;
    --checkpoint-keep) checkpoint_keep=$2; shift 2 ;;
    --dataset) dataset=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--model tpu-cnn|mlp80m] [--epochs N] [--save-freq S] [--kill-after STEP] [--checkpoint-keep K] [--keep]" >&2; exit 2 ;;
  esac
done
case $model in
  tpu-cnn) : "${epochs:=2}" "${save_freq:=5}" "${kill_after:=20}" "${checkpoint_keep:=1}" ;;
  mlp80m) : "${epochs:=2}" "${save_freq:=5}" "${kill_after:=10}" "${checkpoint_keep:=1}" ;;
  *) echo "big_model: --model is tpu-cnn or mlp80m" >&2; exit 2 ;;
esac
source "$repo/deploy/data-dir.sh"
work=$(mktemp -d /tmp/pstrain-big-model.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
now() { date +%s.%N; }
fail() { echo "big_model: $*" >&2; tail -n 20 "$work"/*.log >&2; exit 1; }

python3 - "$repo/deploy/jobs" "$work/job.json" "$epochs" "$save_freq" "$model" "$checkpoint_keep" "$dataset" <<'PY'
import json, sys
jobs, out, epochs, save_freq, model, keep, dataset = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), sys.argv[7]
if model == "tpu-cnn":
    s = json.load(open(f"{jobs}/tpu-cnn.json"))
else:
    s = json.load(open(f"{jobs}/mnist-mlp.json"))
    s["name"] = "mlp-80m"
    s["model"]["layers"] = [{"type": "flatten"}, {"type": "dense", "units": 16384, "activation": "relu"},
                            {"type": "dense", "units": 4096, "activation": "relu"}, {"type": "dense", "units": 10}]
    s["training"]["global_batch_size"] = 500
s["dataset"]["name"] = dataset
s["training"]["epochs"] = epochs
s["backup"] = {"save_freq": save_freq}
s["checkpoint"] = {"keep": keep}
s["training"]["metrics_every_steps"] = 1  # progress (and the rates below) step by step
json.dump(s, open(out, "w"))
PY

# Every process: its log, and a sampler writing its VmHWM (kB) to <name>.hwm every second.
start() {
  local name=$1; shift
  "$@" > "$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  echo "$pid" > "$work/$name.pid"
  ( while [ -r "/proc/$pid/status" ]; do
      awk '/^VmHWM/ {print $2}' "/proc/$pid/status" > "$work/$name.hwm.tmp" 2>/dev/null && mv "$work/$name.hwm.tmp" "$work/$name.hwm"
      sleep 1
    done ) &
}
wait_line() {  # file regex seconds
  local deadline=$((SECONDS + $3))
  until grep -qE "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "no '$2' in $1 within $3 s"
    sleep 0.2
  done
}

# Default timeouts: a step of 10-60 s here does not stop a node's heartbeats (their own thread).
# The 80M MLP's server move and final checkpoint move 960 MB through the coordinator on a shared
# 2-core machine: those two procedures get 10 minutes.
timeouts=()
[ "$model" = mlp80m ] && timeouts=(--server-move-timeout-ms 600000 --server-call-timeout-ms 300000)
rpc_port=${BIG_MODEL_RPC_PORT:-$(free_port)} http_port=${BIG_MODEL_HTTP_PORT:-$(free_port)}
start coordinator "$bin/coordinator/pstrain-coordinator" --listen "127.0.0.1:$rpc_port" --http "127.0.0.1:$http_port" \
  --state-dir "$work/coordinator-state" --data-dir "$PSTRAIN_DATA_DIR" \
  "${timeouts[@]}"
wait_line "$work/coordinator.log" "PSTRAIN_READY" 30
# server-0 and server-1 take the job; server-2 starts once the job runs: the spare.
for i in 0 1; do
  start "server-$i" "$bin/server/pstrain-server" --listen 127.0.0.1:0 --coordinator "127.0.0.1:$rpc_port" \
    --name "server-$i" --data-dir "$work/server-$i-data"
  wait_line "$work/server-$i.log" "PSTRAIN_READY" 30
done
for i in 0 1; do
  start "worker-$i" "$bin/worker/pstrain-worker" --coordinator "127.0.0.1:$rpc_port" --name "worker-$i" --threads 1
done
api="http://127.0.0.1:$http_port/v1"
id=$(curl -sf -X POST -H 'Content-Type: application/json' --data-binary "@$work/job.json" "$api/jobs" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
t_submit=$(now)

# Progress: (time, steps done, state) every second, until the job ends.
( while :; do
    line=$(curl -sf "$api/jobs/$id" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j.get("step", 0), j["state"])' 2>/dev/null) || line=""
    [ -n "$line" ] && echo "$(now) $line" >> "$work/progress"
    case $line in *SUCCEEDED*|*FAILED*|*CANCELLED*) break ;; esac
    sleep 1
  done ) &
poller=$!

wait_line "$work/progress" "RUNNING" 600
start server-2 "$bin/server/pstrain-server" --listen 127.0.0.1:0 --coordinator "127.0.0.1:$rpc_port" \
  --name server-2 --data-dir "$work/server-2-data"
wait_line "$work/coordinator.log" "backup at step $kill_after complete" 1800
# The victim: the job's second server.
port=$(curl -sf "$api/jobs/$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["servers"][-1]["address"].split(":")[1])')
victim=$(grep -l "PSTRAIN_READY role=server port=$port\$" "$work"/server-*.log | xargs -n1 basename | sed 's/\.log$//')
[ -n "$victim" ] || fail "no server listens on port $port"
kill -9 "$(cat "$work/$victim.pid")"
t_kill=$(now)
step_at_kill=$(tail -n 1 "$work/progress" | awk '{print $2}')
echo "killed $victim (SIGKILL) at step $step_at_kill, $(python3 -c "print(round($t_kill - $t_submit))") s after the submission" >&2
wait "$poller"
state=$(tail -n 1 "$work/progress" | awk '{print $3}')
[ "$state" = SUCCEEDED ] || fail "job ended $state"
t_end=$(now)
curl -sf "$api/jobs/$id" > "$work/final.json" || fail "the job's status is unreadable"

t_model=$(curl -sf -o "$work/model.safetensors" -w '%{time_total}' "$api/jobs/$id/model") || fail "model download failed"
t_downloaded=$(now)
t_checkpoint=-
if grep -q "final checkpoint at step" "$work/coordinator.log"; then
  t_checkpoint=$(curl -sf -o "$work/checkpoint.safetensors" -w '%{time_total} %{size_download}' \
    "$api/jobs/$id/checkpoints/latest?optimizer=true") || fail "checkpoint download failed"
  rm -f "$work/checkpoint.safetensors"
fi
for name in coordinator server-0 server-1 server-2 worker-0 worker-1; do
  [ "$name" = "$victim" ] && continue
  pid=$(cat "$work/$name.pid")
  awk '/^VmHWM/ {print $2}' "/proc/$pid/status" > "$work/$name.hwm" 2>/dev/null || true
done

echo "$t_submit $t_kill $t_end $t_downloaded $step_at_kill $victim" > "$work/times"
python3 - "$work" "$t_submit" "$t_kill" "$t_end" "$t_downloaded" "$step_at_kill" "$victim" \
  "$0 --model $model --epochs $epochs --save-freq $save_freq --kill-after $kill_after --checkpoint-keep $checkpoint_keep" \
  "$t_model" "$t_checkpoint" <<'PY'
import glob, json, os, re, statistics, struct, sys
from datetime import datetime
work, t_submit, t_kill, t_end, t_dl = sys.argv[1], *map(float, sys.argv[2:6])
step_at_kill, victim, command = int(sys.argv[6]), sys.argv[7], sys.argv[8]
t_model, t_checkpoint = sys.argv[9], sys.argv[10]
progress = [(float(t), int(s), st) for t, s, st in (l.split() for l in open(f"{work}/progress"))]
log = open(f"{work}/coordinator.log").read()

def rate(points):
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]) if len(points) > 1 and points[-1][0] > points[0][0] else float("nan")

# Coordinator log times are wall-clock HH:MM:SS.mmm of today.
def log_time(pattern):
    m = re.search(r"^\w (\d\d):(\d\d):(\d\d\.\d+) .*" + pattern, log, re.M)
    if not m: return None
    day = datetime.fromtimestamp(t_kill).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    return day + int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])

before = [p for p in progress if p[0] <= t_kill and p[1] > 0]
running_again = log_time("RUNNING again from step")
m = re.search(r"RUNNING again from step (\d+) .*?(\d+) step\(s\) to replay", log)
rolled_to, replayed = (int(m[1]), int(m[2])) if m else (None, None)
moved = re.search(r"server '([^']+)' did not come back; moving its shard to '([^']+)'", log)
# Back where it was: the first step past the last one seen before the kill, after the recovery.
last_before = max((p[1] for p in progress if p[0] <= t_kill), default=0)
back = next((p for p in progress if running_again and p[0] >= running_again and p[1] > last_before), None)
after = [p for p in progress if running_again and p[0] >= running_again and p[2] == "RUNNING"]
# after: from the first sample past the replayed steps, so the rate is of new steps.
after = [p for p in after if back and p[0] >= back[0]] or after

with open(f"{work}/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
size = os.path.getsize(f"{work}/model.safetensors")
tensors = {k: v for k, v in header.items() if k != "__metadata__"}
data_bytes = max(v["data_offsets"][1] for v in tensors.values())
assert size == 8 + n + data_bytes, (size, n, data_bytes)
assert all(v["dtype"] == "F32" for v in tensors.values())
params = data_bytes // 4

print(f"command: {command}")
print(f"machine: {os.cpu_count()} cores, " + open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].split('\n')[0].strip())
print(f"job: {progress[-1][1]} steps, SUCCEEDED in {t_end - t_submit:.0f} s (submit to SUCCEEDED)")
final = json.load(open(f"{work}/final.json"))
recoveries = final.get("recoveries", {})
print(f"test accuracy {final.get('test_accuracy')}, test loss {final.get('test_loss')}; recoveries: "
      f"{recoveries.get('count') if isinstance(recoveries, dict) else recoveries}, replayed steps "
      f"{recoveries.get('replayed_steps') if isinstance(recoveries, dict) else '-'}")
print(f"steps/s before the kill: {rate(before):.3f} (steps 1..{before[-1][1] if before else 0})")
print(f"steps/s after the recovery: {rate(after):.3f} (steps {after[0][1] if after else '-'}..{after[-1][1] if after else '-'})")
print(f"kill of {victim} at step {step_at_kill}: " + (f"shard moved '{moved[1]}' -> '{moved[2]}', " if moved else "no move logged, ") +
      f"rolled back to step {rolled_to}, {replayed} step(s) replayed")
if running_again: print(f"recovery: RUNNING again {running_again - t_kill:.1f} s after the kill")
if back: print(f"recovery: past step {last_before} again {back[0] - t_kill:.1f} s after the kill (1 s polling)")
print(f"model: {size} bytes ({size / 1e6:.1f} MB), {len(tensors)} tensors, {params} float32 parameters, header {n} bytes; "
      f"GET /v1/jobs/{{id}}/model in {float(t_model):.2f} s ({size / float(t_model) / 1e6:.0f} MB/s)")
if t_checkpoint != "-":
    secs, got = t_checkpoint.split()
    print(f"checkpoint with the optimizer's slots: {int(got)} bytes, GET in {float(secs):.2f} s ({int(got) / float(secs) / 1e6:.0f} MB/s)")

# Backups: each server's write (synced, on its store thread) and its replica's send to the coordinator.
for what, pattern in [("backup write", r"backup at step (\d+) written in (\d+) ms"),
                      ("replica send", r"replica of the backup at step (\d+) sent in (\d+) ms")]:
    ms = []
    for f in sorted(glob.glob(f"{work}/server-*.log")):
        ms += [int(m[2]) for m in re.finditer(pattern, open(f).read())]
    if ms:
        print(f"{what} per server: {len(ms)} of them, median {statistics.median(ms) / 1000:.2f} s, max {max(ms) / 1000:.2f} s")
checkpoints = re.findall(r"checkpoint at step (\d+) stored \((\d+) bytes\)", log)
if checkpoints:
    print(f"checkpoints stored by the coordinator: {len(checkpoints)}, {int(checkpoints[-1][1]) / 1e6:.0f} MB each")
moving = log_time("did not come back; moving its shard")
if moving and running_again:
    print(f"server move: moving -> RUNNING again (connect, configure, adopt the replica, restore on every server) "
          f"{running_again - moving:.1f} s")

# What each process holds of the model: a server its shard with the optimizer's slots (Adam: 3
# floats per parameter; the chunk plan balances bytes over the servers), a worker the values.
slots = 2 if '"adam"' in open(f"{work}/job.json").read() else 0
servers = 2
held = {"coordinator": 0, "worker-0": params * 4, "worker-1": params * 4}
for s in ["server-0", "server-1", "server-2"]: held[s] = params * 4 * (1 + slots) // servers
print("peak RSS (VmHWM) against the parameters and optimizer slots held:")
print("| process | peak RSS | held (parameters + slots) | ratio |")
print("|---|---|---|---|")
for name in ["coordinator", "server-0", "server-1", "server-2", "worker-0", "worker-1"]:
    try:
        kb = int(open(f"{work}/{name}.hwm").read())
        note = " (killed; last sample)" if name == victim else " (the spare)" if name == "server-2" else ""
        ratio = f"{kb * 1024 / held[name]:.2f}" if held[name] else "-"
        print(f"| {name}{note} | {kb / 1024:.0f} MiB | {held[name] / 2**20:.0f} MiB | {ratio} |")
    except (OSError, ValueError):
        print(f"| {name} | - | | |")
PY
