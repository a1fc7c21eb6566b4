#!/usr/bin/env bash
# Backup cost: the MLP (sync or async, 2 servers, 2 workers) trained with no backups, save_freq
# 100, 10 and "epoch", in one run, interleaved over repeats; reports training samples/s (median
# of the epochs after the first), the slowdown against no backups, and the servers' time per
# backup. In async mode every backup is a consistent cut (workers pause between steps) and
# save_freq counts the steps of all workers together.
#
# Usage: tests/bench/backup_bench.sh [--repeats N] [--epochs E] [--mode sync|async]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
repeats=3 epochs=6 mode=sync
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    *) echo "usage: $0 [--repeats N] [--epochs E] [--mode sync|async]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/pstrain-backup-bench.XXXXXX)
. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call
configs=(none 100 10 epoch)
for r in $(seq "$repeats"); do
  for c in "${configs[@]}"; do
    spec="$work/$c.json"
    python3 - "$repo/deploy/jobs/mnist-mlp.json" "$spec" "$c" "$epochs" "$mode" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["training"]["epochs"] = int(sys.argv[4]); s["training"]["mode"] = sys.argv[5]
s["backup"] = {} if sys.argv[3] == "none" else {"save_freq": sys.argv[3] if sys.argv[3] == "epoch" else int(sys.argv[3])}
json.dump(s, open(sys.argv[2], "w"))
PY
    dir="$work/run-$c-$r"
    LOCAL_CLUSTER_DIR="$dir" HTTP_PORT=$(free_port) RPC_PORT=$(free_port) SERVERS=2 WORKERS=2 \
      "$repo/deploy/local-cluster.sh" run "$spec" > "$dir.out" 2>&1 || { echo "run $c failed:"; tail "$dir.out"; exit 1; }
    rate=$(grep '^epoch' "$dir.out" | tail -n +2 | sed 's/.*| \([0-9]*\) samples\/s.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    ms=$(cat "$dir"/server-*.log 2>/dev/null | sed -n 's/.*written in \([0-9]*\) ms.*/\1/p' | sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "-")}')
    count=$(cat "$dir"/server-*.log 2>/dev/null | grep -c 'written in' || true)
    echo "$c $rate $ms $count" >> "$work/results"
    echo "repeat $r: save_freq $c: $rate samples/s, backup write median $ms ms ($count writes)" >&2
  done
done
echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); command: $0 --repeats $repeats --epochs $epochs --mode $mode"
echo
echo "| save_freq | samples/s (median) | vs no backups | backup write, median ms per server | backups written |"
echo "|---|---|---|---|---|"
base=$(awk '$1 == "none" {print $2}' "$work/results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
for c in "${configs[@]}"; do
  rate=$(awk -v c="$c" '$1 == c {print $2}' "$work/results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  ms=$(awk -v c="$c" '$1 == c {print $3}' "$work/results" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  n=$(awk -v c="$c" '$1 == c {print $4}' "$work/results" | head -1)
  python3 -c "print(f'| $c | $rate | {100*($rate/$base-1):+.1f}% | $ms | $n |')"
done
rm -rf "$work"
