#!/usr/bin/env bash
# fault_soak.sh: a randomized fault soak on the network-namespace test bed (docs/TESTBED.md).
# Not in CI: minutes per trial.
#
# Usage: tests/netbed/fault_soak.sh [--trials N] [--seed S] [--keep] [--mode sync|async|alternate]
#                                   [--epochs E]
#   --trials N   fault trials (default 10)
#   --seed S     seed of every random choice (default 1): mode order aside, the same seed gives
#                the same victims, faults, fault lengths and moments (as fractions of the run)
#   --keep       keep everything of every trial: logs, the coordinator's state and the servers'
#                data (~0.5 GB a trial). Default: only the logs, job record and parameters of
#                failed trials
#   --mode M     sync, async, or alternate (default: trial 1 sync, 2 async, 3 sync, ...)
#   --epochs E   epochs of the job (default 8; see Time below)
# Root only; exits 77 if `netbed.sh check` fails (not root, no ip netns). BUILD_DIR (default
# build) is the build tree; PSTRAIN_DATA_DIR as deploy/data-dir.sh sets it.
#
# The bed: nodes c, s0, s1, s2, w0, w1, every node's egress at 1gbit (tbf). The job is
# deploy/jobs/mnist-mlp.json with a backup every 10 steps, E epochs, 2 workers, 2 servers.
# server-0 (s0) and server-1 (s1) take the job; server-2 (s2) is started once training runs, as
# the spare a lost server's shard can move to. Coordinator flags: --heartbeat-ms 200 and every
# other timeout at its default (dead after 5 s, a lost server moved after 10 s, ...).
#
# First, once per mode used, a no-fault twin of the job: its saved parameters (--save-params,
# raw float32) and their sha256, and its training time T (first step to the coordinator's exit).
# Then each trial (a fresh bed each time):
#   1. start the cluster; wait for the job's first step (GET /v1/jobs/cli-job from inside c);
#   2. wait a random moment in [0, 0.75 T) after that first step;
#   3. apply ONE fault to a random role (coordinator, server-0, server-1, worker-0, worker-1):
#        kill9   SIGKILL the process, restart it in its namespace 1 s later (same flags: a server
#                keeps its name and --data-dir, the coordinator its --state-dir and --job)
#        freeze  `fault freeze NODE` for a random 5-60 s, then `thaw`
#        cut     `fault link-down NODE` for a random 3-30 s, then `link-up`
#   4. wait for the coordinator to exit (--exit-when-done); a harness timeout of 600 s only
#      reports a hang (the coordinator's own timeouts are what is tested);
#   5. restart the coordinator on the same state without --job and read the job's record over
#      REST (as BedCluster::job_status): state, recoveries, replayed steps, test accuracy.
# It asserts, per trial: the coordinator exited 0 and the job SUCCEEDED; in sync mode the saved
# parameters are byte-identical (sha256) to the twin's (else the max abs difference is shown).
# Shown but not asserted: the sync example ledger (every example once per epoch, from the
# coordinator's log; "-" when not printed or not audited), the test accuracy.
# At the end: a markdown table (a row per trial) and a summary line; the exit status is 1 if a
# job did not SUCCEED or a sync trial was not bit-identical, else 0. Logs of failed trials stay in
# the work directory (/tmp/pstrain-fault-soak.XXXXXX, printed). The bed is torn down on every
# exit, also on Ctrl-C.
#
# Time, measured on the 2-core machine with other tests running (load average 7-12): the
# no-fault twin trains 28-38 s (sync) or 46-49 s (async) at the default 8 epochs (not measured
# on an idle machine: expect less); a trial is the start (~3 s), the job, the fault's own length (kill9 1 s,
# freeze up to 60 s, cut up to 30 s) with its recovery (5 s dead timeout, 10 s server move, ...),
# and the status read (~3 s): 38-87 s each, ~60 s mean; `--trials 3` took 4.6 min with both
# twins. 30 trials: about 30-35 min. `--epochs 4` halves the training part.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
netbed="$here/netbed.sh"
python=/usr/bin/python3

trials=10 seed=1 keep=0 mode_arg=alternate epochs=8
usage() { echo "usage: $0 [--trials N] [--seed S] [--keep] [--mode sync|async|alternate] [--epochs E]" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --trials) trials=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --mode) mode_arg=${2:?}; shift 2 ;;
    --epochs) epochs=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
[[ "$trials" =~ ^[0-9]+$ && "$seed" =~ ^[0-9]+$ && "$epochs" =~ ^[1-9][0-9]*$ ]] || usage
[[ "$mode_arg" =~ ^(sync|async|alternate)$ ]] || usage

"$netbed" check || exit $?
for b in coordinator/pstrain-coordinator server/pstrain-server worker/pstrain-worker; do
  [[ -x "$build/$b" ]] || { echo "fault_soak: no $build/$b (build it first)" >&2; exit 2; }
done
source "$root/deploy/data-dir.sh"

work=$(mktemp -d /tmp/pstrain-fault-soak.XXXXXX)
# A bed of our own (1-4 of [a-z0-9]): beds of tests running at the same time do not meet.
BED="fs$(( $$ % 100 ))"
nb() { "$netbed" -b "$BED" "$@"; }
cleanup() { nb down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'echo "fault_soak: interrupted; logs in $work" >&2; exit 130' INT TERM
# Sleeps that a signal interrupts at once (a trap waits for a foreground sleep to end).
nap() { sleep "$1" & wait $!; }
now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "fault_soak: $*" >&2; }

NODES=(c s0 s1 s2 w0 w1)
C_ADDR=$(nb addr c)
JOB_URL="http://$C_ADDR:8080/v1/jobs/cli-job"  # cli-job: the id of the coordinator's --job
declare -A NODE_OF=([coordinator]=c [server-0]=s0 [server-1]=s1 [server-2]=s2 [worker-0]=w0 [worker-1]=w1)

for m in sync async; do
  "$python" - "$root/deploy/jobs/mnist-mlp.json" "$work/job-$m.json" "$m" "$epochs" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["backup"] = {"save_freq": 10}
s["training"].update(mode=sys.argv[3], epochs=int(sys.argv[4]), workers=2, servers=2)
json.dump(s, open(sys.argv[2], "w"), indent=1)
PY
done

# --- processes of a trial ---------------------------------------------------------------------
declare -A PID READY0
dir=""           # the trial's directory
coord_base=()    # the coordinator's flags without the job
coord_job=()     # ... with it

ready_count() { local n; n=$(grep -c 'PSTRAIN_READY' "$dir/$1.log" 2>/dev/null); echo "${n:-0}"; }

# start NAME ARGV...: runs NAME (a role) in its node's namespace, its log appended to DIR/NAME.log.
start() {
  local name=$1; shift
  READY0[$name]=$(ready_count "$name")
  echo "=== $(date +%T.%N | cut -c1-12) start: $*" >>"$dir/$name.log"
  # Not through nb (a function runs in a subshell of its own when sent to the background): the
  # script, then ip netns exec, exec the program, so $! is the program's pid.
  "$netbed" -b "$BED" exec "${NODE_OF[${name%-status}]}" "$@" >>"$dir/$name.log" 2>&1 &
  PID[$name]=$!
}

# wait_ready NAME SECONDS: until NAME's latest run printed PSTRAIN_READY.
wait_ready() {
  local name=$1 deadline=$((SECONDS + $2))
  while (( $(ready_count "$name") <= ${READY0[$name]} )); do
    if (( SECONDS > deadline )) || ! kill -0 "${PID[$name]}" 2>/dev/null; then
      log "$name did not get ready"; return 1
    fi
    sleep 0.1
  done
}

start_role() {  # role (first start or restart, same flags)
  local role=$1 i
  case $role in
    coordinator) start coordinator "${coord_job[@]}" ;;
    server-*)
      i=${role#server-}
      start "$role" "$build/server/pstrain-server" --listen "$(nb addr "s$i"):7100" --advertise-host "$(nb addr "s$i")" \
        --coordinator "$C_ADDR:7000" --name "$role" --data-dir "$dir/$role-data" ;;
    worker-*) start "$role" "$build/worker/pstrain-worker" --coordinator "$C_ADDR:7000" --name "$role" ;;
  esac
}

job_json() { nb exec c curl -sS --max-time 5 "$JOB_URL" 2>/dev/null; }
job_step() { job_json | grep -o '"step":[0-9]*' | head -1 | cut -d: -f2; }

# --- one run ----------------------------------------------------------------------------------
# run NAME MODE FAULT VICTIM FRACTION(permille) DURATION(s) WINDOW(s): sets the R_* results.
run() {
  local name=$1 mode=$2 fault=$3 victim=$4 frac=$5 dur=$6 window=$7
  dir="$work/$name"
  mkdir -p "$dir"
  R_code="" R_state="" R_recoveries="" R_replayed="" R_acc="" R_fault="$fault" R_at="-" R_train="" R_total="" R_ledger="-" R_notes="-"
  local t_start t_step t_end
  t_start=$(now)
  if ! nb up "${NODES[@]}" >"$dir/bed.log" 2>&1; then R_code="bed"; R_state="NO_BED"; return; fi
  for n in "${NODES[@]}"; do nb rate "$n" 1gbit >>"$dir/bed.log" 2>&1; done
  coord_base=("$build/coordinator/pstrain-coordinator" --listen "$C_ADDR:7000" --http "$C_ADDR:8080"
              --state-dir "$dir/coordinator-state" --data-dir "$PSTRAIN_DATA_DIR" --heartbeat-ms 200)
  coord_job=("${coord_base[@]}" --job "$work/job-$mode.json" --exit-when-done --save-params "$dir/params.bin")
  PID=() READY0=()
  start_role coordinator
  wait_ready coordinator 30
  start_role server-0; start_role server-1
  wait_ready server-0 30; wait_ready server-1 30
  start_role worker-0; start_role worker-1

  local step="" deadline=$((SECONDS + 120))
  while (( SECONDS < deadline )); do
    step=$(job_step)
    [[ "${step:-0}" -gt 0 ]] && break
    kill -0 "${PID[coordinator]}" 2>/dev/null || break
    nap 0.2
  done
  t_step=$(now)
  if [[ "${step:-0}" -le 0 ]]; then
    log "$name: the job did not start within 120 s"
    [[ "$fault" == none ]] || R_fault="none(no start)"
    fault=none
  fi
  # The spare: registered after the job took server-0 and server-1.
  start_role server-2
  wait_ready server-2 30

  if [[ "$fault" != none ]]; then
    local delay wait_s
    delay=$(awk -v f="$frac" -v w="$window" 'BEGIN { printf "%.2f", f / 1000 * w }')
    wait_s=$(awk -v d="$delay" -v a="$t_step" -v b="$(now)" 'BEGIN { s = a + d - b; printf "%.2f", (s > 0 ? s : 0) }')
    nap "$wait_s"
    R_at=$(elapsed "$t_step" "$(now)")
    if ! kill -0 "${PID[coordinator]}" 2>/dev/null; then
      R_fault="none(ended)"  # the job was over before the moment
    else
      local node=${NODE_OF[$victim]} at_step
      at_step=$(job_step)
      R_at="$R_at@${at_step:-?}"
      echo "=== $(date +%T.%N | cut -c1-12) fault $fault $victim ($node) ${dur}s at step ${at_step:-?}" | tee -a "$dir/faults.log" >>"$dir/coordinator.log"
      case $fault in
        kill9)
          # Never waited for again: disowned, so that bash does not report it "Killed".
          disown "${PID[$victim]}" 2>/dev/null
          kill -9 "${PID[$victim]}" 2>/dev/null
          nap 1
          start_role "$victim" ;;
        freeze)
          R_fault="freeze ${dur}s"
          nb fault freeze "$node" >>"$dir/faults.log" 2>&1
          nap "$dur"
          nb fault thaw "$node" >>"$dir/faults.log" 2>&1 ;;
        cut)
          R_fault="cut ${dur}s"
          nb fault link-down "$node" >>"$dir/faults.log" 2>&1
          nap "$dur"
          nb fault link-up "$node" >>"$dir/faults.log" 2>&1 ;;
      esac
      echo "=== $(date +%T.%N | cut -c1-12) fault over" | tee -a "$dir/faults.log" >>"$dir/coordinator.log"
    fi
  fi

  # The end: the coordinator exits when the job has ended.
  deadline=$((SECONDS + 600))
  while kill -0 "${PID[coordinator]}" 2>/dev/null && (( SECONDS < deadline )); do nap 0.5; done
  if kill -0 "${PID[coordinator]}" 2>/dev/null; then
    R_code="HANG"
    log "$name: the coordinator did not exit within 600 s (a hang): killed"
    kill -9 "${PID[coordinator]}" 2>/dev/null
    wait "${PID[coordinator]}" 2>/dev/null
  else
    wait "${PID[coordinator]}"
    R_code=$?
  fi
  t_end=$(now)
  R_train=$(elapsed "$t_step" "$t_end")

  # The job's record: a coordinator on the same state, without the job, asked over REST.
  start coordinator-status "${coord_base[@]}"
  if wait_ready coordinator-status 30; then job_json >"$dir/job.json"; fi
  read -r R_state R_recoveries R_replayed R_acc R_notes < <("$python" - "$dir/job.json" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    print("UNREACHABLE ? ? ? -"); sys.exit()
r = j.get("recoveries") or {}
rep = r.get("replayed_steps") or []
acc = j.get("test_accuracy")
notes = " | ".join(j.get("notes") or []) or "-"
if j.get("reason"):
    notes = "reason: " + j["reason"] + " | " + notes
print(j.get("state"), r.get("count", 0), "+".join(map(str, rep)) or "0",
      "nan" if acc is None else f"{acc:.4f}", notes.replace("\n", " "))
PY
)
  if [[ "$mode" == sync ]]; then
    local lines bad
    lines=$(grep -E '^examples of epoch [0-9]+: [0-9]+ used once' "$dir/coordinator.log" || true)
    if [[ -n "$lines" ]]; then
      bad=$(grep -vc ', 0 missing, 0 used more than once$' <<<"$lines")
      if [[ "$bad" -eq 0 ]]; then R_ledger=once; else R_ledger="BAD($bad)"; fi
    fi
  fi
  nb down >>"$dir/bed.log" 2>&1
  R_total=$(elapsed "$t_start" "$(now)")
}

# --- the twins --------------------------------------------------------------------------------
declare -A TWIN_SHA TWIN_TRAIN TWIN_ACC
twin() {  # mode
  local m=$1
  [[ -n "${TWIN_SHA[$m]:-}" ]] && return
  log "no-fault twin ($m)..."
  run "twin-$m" "$m" none none 0 0 0
  if [[ "$R_code" != 0 || "$R_state" != SUCCEEDED || ! -s "$dir/params.bin" ]]; then
    log "the no-fault twin ($m) failed: exit $R_code, state $R_state; logs in $dir"
    exit 1
  fi
  cp "$dir/params.bin" "$work/twin-$m.bin"
  TWIN_SHA[$m]=$(sha256sum "$work/twin-$m.bin" | cut -c1-64)
  TWIN_TRAIN[$m]=$R_train
  TWIN_ACC[$m]=$R_acc
  log "twin ($m): training ${R_train} s, run ${R_total} s, test accuracy $R_acc, sha256 ${TWIN_SHA[$m]:0:16}"
  [[ $keep -eq 1 ]] || rm -rf "$dir"
}

# --- the trials -------------------------------------------------------------------------------
log "$trials trials, seed $seed, mode $mode_arg, $epochs epochs, bed $BED, work dir $work"
RANDOM=$seed
VICTIMS=(coordinator server-0 server-1 worker-0 worker-1)
FAULTS=(kill9 freeze cut)
results="$work/results.tsv"
: >"$results"
for ((t = 1; t <= trials; ++t)); do
  # Every draw in this shell (not in a subshell, whose RANDOM is seeded anew), in a fixed order.
  victim=${VICTIMS[RANDOM % 5]}
  fault=${FAULTS[RANDOM % 3]}
  frac=$((RANDOM % 1000))
  r=$RANDOM
  case $fault in freeze) dur=$((5 + r % 56)) ;; cut) dur=$((3 + r % 28)) ;; *) dur=0 ;; esac
  case $mode_arg in alternate) (( t % 2 )) && mode=sync || mode=async ;; *) mode=$mode_arg ;; esac
  twin "$mode"
  window=$(awk -v t="${TWIN_TRAIN[$mode]}" 'BEGIN { printf "%.2f", 0.75 * t }')
  log "trial $t: $mode, $fault $victim$( ((dur)) && echo " ${dur}s") at ${frac}/1000 of ${window} s..."
  run "trial-$t" "$mode" "$fault" "$victim" "$frac" "$dur" "$window"
  same="-" diff="-"
  if [[ "$mode" == sync ]]; then
    if [[ -s "$dir/params.bin" ]]; then
      if [[ "$(sha256sum "$dir/params.bin" | cut -c1-64)" == "${TWIN_SHA[sync]}" ]]; then
        same=yes diff=0
      else
        same=NO
        diff=$("$python" -c '
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype="<f4"); b = np.fromfile(sys.argv[2], dtype="<f4")
print(f"{np.max(np.abs(a - b)):.3g}" if a.shape == b.shape else f"size {a.size} vs {b.size}")' "$dir/params.bin" "$work/twin-sync.bin")
      fi
    else
      same=NO diff="no params"
    fi
  fi
  ok=1
  [[ "$R_code" == 0 && "$R_state" == SUCCEEDED ]] || ok=0
  [[ "$same" == NO ]] && ok=0
  fields=("$t" "$mode" "$R_fault" "$victim" "$R_at" "$R_train" "$R_total" "$R_code" "$R_state" "$R_recoveries"
          "$R_replayed" "$R_acc" "$same" "$diff" "$R_ledger" "$ok")
  (IFS=$'\t'; echo "${fields[*]}") >>"$results"
  log "trial $t: exit $R_code, $R_state, recoveries $R_recoveries (replayed $R_replayed), accuracy $R_acc, identical $same ($diff), ledger $R_ledger, ${R_total} s; notes: $R_notes"
  if [[ $ok -eq 0 ]]; then
    log "trial $t FAILED: logs kept in $dir"
    for f in coordinator server-0 server-1 server-2 worker-0 worker-1; do
      [[ -f "$dir/$f.log" ]] && { echo "--- $f (last 15 lines)"; tail -n 15 "$dir/$f.log"; } >&2
    done
    # The logs, job.json and params.bin stay; RocksDB state is hundreds of MB a trial.
    [[ $keep -eq 1 ]] || rm -rf "$dir"/coordinator-state "$dir"/server-*-data
  elif [[ $keep -eq 0 ]]; then
    rm -rf "$dir"
  fi
done

# --- the report -------------------------------------------------------------------------------
"$python" - "$results" "$seed" "$epochs" "${TWIN_ACC[sync]:-}" "${TWIN_ACC[async]:-}" <<'PY'
import sys
cols = ["#", "mode", "fault", "victim", "at s@step", "train s", "trial s", "exit", "state", "recoveries",
        "replayed", "test acc", "bit-identical", "max abs diff", "ledger"]
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print()
print(f"fault soak: seed {sys.argv[2]}, {sys.argv[3]} epochs; no-fault test accuracy: "
      f"sync {sys.argv[4] or '-'}, async {sys.argv[5] or '-'}")
print()
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for r in rows:
    print("| " + " | ".join(r[:len(cols)]) + " |")
succeeded = sum(r[8] == "SUCCEEDED" for r in rows)
sync = [r for r in rows if r[1] == "sync"]
same = sum(r[12] == "yes" for r in sync)
replayed = [sum(int(x) for x in r[10].split("+") if x.isdigit()) for r in rows]
mean = sum(replayed) / len(replayed) if replayed else 0
print()
print(f"**{len(rows)} trials: {succeeded} SUCCEEDED; sync bit-identical {same}/{len(sync)}; "
      f"replayed steps per trial max {max(replayed, default=0)} / mean {mean:.1f}; "
      f"failed: {', '.join(r[0] for r in rows if r[15] != '1') or 'none'}**")
PY
log "work dir: $work"
if grep -q $'\t0$' "$results"; then exit 1; fi
exit 0
