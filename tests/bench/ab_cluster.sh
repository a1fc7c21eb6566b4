#!/usr/bin/env bash
# ab_cluster.sh — A/B of two builds on one sync (or async) cluster job, interleaved: A, B, A, B, ...
# Each run is `deploy/local-cluster.sh run SPEC` with 2 workers x 2 servers, 1 compute thread per
# worker (the suite's sync-2x2 config); samples/s is the median of the run's per-epoch figures
# without epoch 1 (tests/bench/suite_jobs.py parse). Prints every run, then the medians and B / A.
#
# Usage: tests/bench/ab_cluster.sh BUILD_A BUILD_B SPEC [REPEATS (default 3)]
#   BUILD_A, BUILD_B: build directories inside the repository (local-cluster.sh takes them
#   relative), each with coordinator/, server/, worker/ and cli/ binaries. A copy of the old
#   binaries in e.g. build-old/ is enough.
# Env: PSTRAIN_DATA_DIR (the spec's datasets; suite_jobs.py prepare writes the suite's specs and
#      data), PORT_BASE (default 19700), ENV_A / ENV_B (VAR=value words set for that side's
#      cluster only: one build two ways, e.g. ENV_B=PSTRAIN_SERVER_SAME_HOST_SOCKET=0).
#      Servers use same-host sockets by default since ce3aa87: a build from before it against
#      one after it differs in transport too unless both sides set the variable.
# Every run's log and cluster directory are kept in a fresh directory under /tmp (printed first),
# to read a run again; delete it when done.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 3 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
A=$1 B=$2 SPEC=$(realpath "$3") REPEATS=${4:-3}
port=${PORT_BASE:-19700}
work=$(mktemp -d /tmp/ab-cluster.XXXXXX)  # mktemp's template: a fresh name per invocation
echo "ab_cluster: logs in $work"
declare -A rates=([A]="" [B]="")
for rep in $(seq 1 "$REPEATS"); do
  for side in A B; do
    build=${!side}
    build=${build#"$ROOT"/}
    log=$work/$side-r$rep.log
    port=$((port + 2))
    side_env=ENV_$side
    # shellcheck disable=SC2086  # the words are VAR=value pairs
    env ${!side_env:-} LOCAL_CLUSTER_DIR=$work/cluster-$side-$rep RPC_PORT=$port HTTP_PORT=$((port + 1)) SERVERS=2 WORKERS=2 \
      WORKER_THREADS=1 WORKER_FLAGS='' BUILD_DIR=$build \
      timeout -k 10 1800 "$ROOT/deploy/local-cluster.sh" run "$SPEC" >"$log" 2>&1 ||
      { tail -n 20 "$log" >&2; echo "ab_cluster: $side run $rep failed (log: $log)" >&2; exit 1; }
    read -r sps acc _ <<<"$(/usr/bin/python3 "$ROOT/tests/bench/suite_jobs.py" parse "$log")"
    printf '%s (%s %s) run %s: %s samples/s, accuracy %s, load avg %s\n' "$side" "$build" "${!side_env:-}" "$rep" "$sps" "$acc" \
      "$(cut -d' ' -f1 /proc/loadavg)"
    rates[$side]+="$sps "
  done
done
/usr/bin/python3 - "${rates[A]}" "${rates[B]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"median A {ma:,.0f}, B {mb:,.0f} samples/s; B / A = {mb / ma:.2f} (per pair: "
      + ", ".join(f"{y / x:.2f}" for x, y in zip(a, b)) + ")")
PY
