#!/usr/bin/env bash
# The cost of the cluster credential on the gradient exchange: pstrain-exchange-bench against two
# parameter servers started here, one open and one with a cluster secret (handshake on every
# connection, worker token on every push), run alternately (open, secret, open, ...) so that the
# machine's drift hits both alike. Prints each run's GB/s and connect time, then the medians and
# their ratio (secret / open).
#
# Usage: tests/bench/auth_bench.sh [ROUNDS (5)]    Environment: BUILD_DIR (build), SECONDS_PER_RUN
# (5), CLIENTS (1), MODE (sync), OPEN_PORT (17501), SECRET_PORT (17502), KEEP_LOGS (0).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BUILD_DIR:-$repo/build}
case $bin in /*) ;; *) bin=$repo/$bin ;; esac
rounds=${1:-5}
work=$(mktemp -d /tmp/pstrain-auth-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${KEEP_LOGS:-0}" = 1 ] && echo "logs in $work" || rm -rf "$work"
}
trap cleanup EXIT

(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/secret")
start_server() {  # name port [flags...]
  local name=$1 port=$2; shift 2
  "$bin/server/pstrain-server" --listen "127.0.0.1:$port" --coordinator 127.0.0.1:1 --data-dir "$work/$name-data" \
    --log-level warning "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q PSTRAIN_READY "$work/$name.log" && return 0; sleep 0.1; done
  echo "auth-bench: $name did not start:" >&2; cat "$work/$name.log" >&2; exit 1
}
open_port=${OPEN_PORT:-17501}
secret_port=${SECRET_PORT:-17502}
start_server open "$open_port"
start_server secret "$secret_port" --cluster-secret-file "$work/secret"

bench() {  # port [flags...]: prints "GB/s connect_ms"
  local port=$1; shift
  "$bin/tests/pstrain-exchange-bench" --server "127.0.0.1:$port" --seconds "${SECONDS_PER_RUN:-5}" \
    --clients "${CLIENTS:-1}" --mode "${MODE:-sync}" "$@" | sed -n 's/^RESULT //p' |
    /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["gb_per_second"], r["connect_ms"])'
}

open_runs=() secret_runs=()
for r in $(seq "$rounds"); do
  read -r gb ms < <(bench "$open_port")
  open_runs+=("$gb")
  echo "round $r: open   $gb GB/s (connect $ms ms)"
  read -r gb ms < <(bench "$secret_port" --cluster-secret-file "$work/secret")
  secret_runs+=("$gb")
  echo "round $r: secret $gb GB/s (connect $ms ms)"
done
/usr/bin/python3 - "${open_runs[*]}" "${secret_runs[*]}" <<'EOF'
import statistics, sys
o = [float(x) for x in sys.argv[1].split()]
s = [float(x) for x in sys.argv[2].split()]
mo, ms = statistics.median(o), statistics.median(s)
pairs = [b / a for a, b in zip(o, s)]
print(f"median: open {mo:.3f} GB/s, secret {ms:.3f} GB/s, ratio {ms / mo:.3f}; "
      f"per-round ratios {' '.join(f'{p:.3f}' for p in pairs)} (median {statistics.median(pairs):.3f})")
EOF
