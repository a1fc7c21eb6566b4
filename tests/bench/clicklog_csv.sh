#!/usr/bin/env bash
# The synthetic click log as users have it, a CSV of string ids, on a local cluster
# (deploy/local-cluster.sh): tests/bench/clicklog_csv.py writes the CSV from a clicklog.py
# directory, uploads it (columns over 65,536 distinct values become id columns), trains a job that
# hashes every id column into sparse tables, and predicts by field name with unseen ids; then each
# process's peak RSS (the coordinator's holds the upload's parse). docs/BENCHMARKS.md "Id columns
# from a CSV".
#
#   tests/bench/clicklog_csv.sh --data /tmp/dd/clicks-big [--rows 2000000] [--lookup K]
# (--lookup K: every id column looked up among its K most frequent ids instead of hashed.)
# Environment: SERVERS (2), WORKERS (2), HTTP_PORT (8180), RPC_PORT (7180), KEEP (0: delete the work
# directory afterwards).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DATA="" ROWS=2000000 LOOKUP=0
while [ $# -gt 0 ]; do
  case $1 in
    --data) DATA=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --lookup) LOOKUP=$2; shift 2 ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
[ -n "$DATA" ] || { sed -n '2,13p' "$0"; exit 2; }
export SERVERS=${SERVERS:-2} WORKERS=${WORKERS:-2}
export HTTP_PORT=${HTTP_PORT:-8180} RPC_PORT=${RPC_PORT:-7180} BUILD=0 AUTH=1
work=$(mktemp -d /tmp/clicklog-csv.XXXXXX)
echo "clicklog_csv: files in $work"
lscpu | grep -E '^Model name' || true
lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' '; echo
export LOCAL_CLUSTER_DIR=$work/cluster PSTRAIN_DATA_DIR=$work/data
mkdir -p "$PSTRAIN_DATA_DIR"
cleanup() {
  "$ROOT/deploy/local-cluster.sh" down >"$work/down.log" 2>&1 || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
"$ROOT/deploy/local-cluster.sh" up >"$work/up.log" 2>&1
PSTRAIN_TOKEN=$(cat "$LOCAL_CLUSTER_DIR/auth/admin-token") /usr/bin/python3 "$ROOT/tests/bench/clicklog_csv.py" \
  --data "$DATA" --url "http://127.0.0.1:$HTTP_PORT" --work "$work" --rows "$ROWS" --workers "$WORKERS" --servers "$SERVERS" \
  --lookup "$LOOKUP"
rss=""
for p in "$LOCAL_CLUSTER_DIR"/*.pid; do
  rss+="$(basename "$p" .pid)=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$(cat "$p")/status" 2>/dev/null || echo "(gone)")MB "
done
echo "clicklog_csv: peak RSS $rss"
