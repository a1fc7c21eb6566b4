#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/CMakeLists.txt) with clang in build-fuzz/ and runs each for
# SECONDS (default 60) on its seed corpus, fuzz/corpus/<target>/, plus a scratch corpus of new
# inputs in build-fuzz/corpus/<target>/. Prints per target: executions, coverage (cov/ft from
# libFuzzer's final stats) and crashes. Exits non-zero if any target crashed; the crashing input
# stays in build-fuzz/crashes/<target>/.
#
# Usage: fuzz/run.sh [SECONDS] [TARGET...]     Environment: FUZZ_BUILD_DIR (build-fuzz), JOBS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
build=${FUZZ_BUILD_DIR:-build-fuzz}
all_targets=(job_spec rest datasets snapshot safetensors param_server shards image archive)
[ $# -gt 0 ] && targets=("$@") || targets=("${all_targets[@]}")

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (apt-get install clang libclang-rt-dev libomp-dev)" >&2
  exit 1
fi

start=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  # -O2 with assertions (no NDEBUG); not -march=native: crashes should reproduce on any machine.
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DPSTRAIN_FUZZ=ON -DPSTRAIN_TESTS=OFF \
    -DPSTRAIN_NATIVE=OFF -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_FLAGS_FUZZ="-O2 -g" -DCMAKE_C_FLAGS_FUZZ="-O2 -g" >/dev/null
fi
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]/#/fuzz_}"
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - start )) s"

[ "$seconds" -gt 0 ] || exit 0

# Options per target: the datasets' parsers must not allocate for a claimed size before the bytes
# are there, so a large allocation is a failure there.
declare -A extra=([datasets]="-malloc_limit_mb=256" [shards]="-malloc_limit_mb=256" [image]="-malloc_limit_mb=600" [archive]="-malloc_limit_mb=600" [rest]="-max_len=65536")
failed=0
summary=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  crashes="$build/crashes/$t"
  rm -rf "$crashes"  # this run's crashes only
  mkdir -p "$corpus" "$crashes"
  log="$build/fuzz-$t.log"
  set +e
  # New inputs go to the scratch corpus (first directory); the seeds are read only.
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=25 -rss_limit_mb=2048 \
    -artifact_prefix="$crashes/" ${extra[$t]:-} "$corpus" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || echo "?")
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || echo "?")
  found=$(find "$crashes" -type f | wc -l)
  line=$(printf '%-12s execs %10s  exec/s %7s  cov %5s  ft %6s  crashes %s' "$t" "$execs" "$rate" "$cov" "$ft" "$found")
  summary+=("$line")
  echo "fuzz: $line"
  if [ $rc -ne 0 ] || [ "$found" -gt 0 ]; then
    failed=1
    echo "fuzz: $t FAILED (exit $rc); input(s) in $crashes/, log in $log:" >&2
    grep -E 'ERROR|SUMMARY|broken|==[0-9]+==' "$log" | head -20 >&2 || true
  fi
done
echo "fuzz: summary (${seconds} s per target, $(( $(date +%s) - start )) s in all)"
printf '  %s\n' "${summary[@]}"
exit $failed
