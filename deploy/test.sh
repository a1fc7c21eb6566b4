#!/usr/bin/env bash
# Builds pstrain and runs its whole test suite through CTest (the CI command), then the fuzz
# targets for a short while each (docs/FUZZING.md), then the unit and in-process tests again
# under the sanitizers (docs/SANITIZERS.md): ThreadSanitizer, then AddressSanitizer +
# UndefinedBehaviorSanitizer, each in a build directory of its own.
#
# Every stage runs even when an earlier one failed (a red TSan run must not hide the ASan
# result), except that nothing runs on a failed build's binaries; at the end a table gives each
# stage's result and seconds and the total. The exit status is non-zero if any stage failed.
#
# Usage: deploy/test.sh [ctest options, e.g. -L unit; they apply to the first run only]
# Environment: PSTRAIN_FUZZ_SECONDS, seconds per fuzz target (default 10; 0 skips fuzzing);
#   PSTRAIN_SANITIZERS, the sanitizer runs (deploy/sanitize.sh kinds; default "tsan asan-core";
#   "asan" is AddressSanitizer on the whole suite, longer than CI's budget; empty skips them);
#   PSTRAIN_CI_SETUP_SECONDS, the seconds .ci/run spent in deploy/setup.sh (a row of the table);
#   PSTRAIN_SANITIZER_START_BY, the seconds after which no sanitizer stage starts (default 3300).
set -uo pipefail
cd "$(dirname "$0")/.."
source deploy/data-dir.sh
echo "test: datasets from $PSTRAIN_DATA_DIR"

names=() results=() seconds=() sanitize_failed=()
failed=0
started=$SECONDS
# The per-test extracts of an earlier run's failures (failed_output below) must not reach this
# run's summary.
rm -f "${BUILD_DIR:-build}"/Testing/first-run.log.test-* "${ASAN_BUILD_DIR:-build-asan}"/Testing/Temporary/LastTest.log.test-* \
  "${TSAN_BUILD_DIR:-build-tsan}"/Testing/Temporary/LastTest.log.test-*
if [ -n "${PSTRAIN_CI_SETUP_SECONDS:-}" ]; then
  names+=("setup (deploy/setup.sh)") results+=(ok) seconds+=("$PSTRAIN_CI_SETUP_SECONDS")
fi
# stage NAME COMMAND...: runs COMMAND, records its result and time.
stage() {
  local name=$1 begin=$SECONDS
  shift
  echo "test: stage '$name' starts"
  if "$@"; then results+=(ok); else results+=(FAILED); failed=1; fi
  names+=("$name") seconds+=($((SECONDS - begin)))
  echo "test: stage '$name' ${results[-1]} after ${seconds[-1]} s"
}
skip() { names+=("$1") results+=("skipped ($2)") seconds+=(0); }
table() {
  local total=$((SECONDS - started + ${PSTRAIN_CI_SETUP_SECONDS:-0}))
  echo
  echo "test: where the time went"
  printf '  %-34s %-28s %8s\n' stage result seconds
  for i in "${!names[@]}"; do printf '  %-34s %-28s %8s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"; done
  printf '  %-34s %-28s %8s\n' total "$([ $failed = 0 ] && echo ok || echo FAILED)" "$total"
}

run_ctest() { (cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j 2 --timeout 900 "$@"); }
# slowest LOG LABEL: the ten longest tests of a ctest log (LastTest.log), where a stage's time went.
slowest() {
  [ -f "$1" ] || return 0
  echo "test: $2: the slowest tests (seconds)"
  awk 'index($0, " Test: ") && $1 ~ /^[0-9]+\/[0-9]+$/ { name = substr($0, index($0, " Test: ") + 7) }
       /^Test time =/ { printf "%8.1f  %s\n", $4, substr(name, 1, 110) }' "$1" | sort -gr | head -10
}

stage "build (deploy/build.sh)" deploy/build.sh
if [ "${results[-1]}" = ok ]; then
  stage "ctest" run_ctest "$@"
  ctest_result=${results[-1]}
  # The first run's full log, kept: the rerun below would overwrite it.
  cp "${BUILD_DIR:-build}/Testing/Temporary/LastTest.log" "${BUILD_DIR:-build}/Testing/first-run.log" 2>/dev/null || true
  slowest "${BUILD_DIR:-build}/Testing/first-run.log" ctest
else
  skip ctest "build failed"
fi

# 10 s per target keeps the fuzz step (a clang build of the targets, about 3 CPU-minutes cold and
# seconds from a warm compiler cache, then a run of each with its seeds first) about 2 minutes on
# 2 cores with a warm cache (docs/FUZZING.md); fuzz/run.sh fails on any crash and leaves the input in build-fuzz/crashes/.
fuzz_seconds=${PSTRAIN_FUZZ_SECONDS:-10}
if [ "$fuzz_seconds" -gt 0 ]; then
  stage "fuzz (fuzz/run.sh $fuzz_seconds)" fuzz/run.sh "$fuzz_seconds"
else
  skip fuzz "PSTRAIN_FUZZ_SECONDS=0"
fi

# A sanitizer stage takes about 5 minutes on a warm compiler cache and 20 on a cold one (both trees
# compile everything again). One starts only while the run has time for a cold one within CI's
# 90 minutes: after PSTRAIN_SANITIZER_START_BY seconds (setup included) it is skipped, and the
# table says so: the stages before it are what a cold cache leaves room for.
start_by=${PSTRAIN_SANITIZER_START_BY:-3300}
for kind in ${PSTRAIN_SANITIZERS-tsan asan-core}; do
  elapsed=$((SECONDS - started + ${PSTRAIN_CI_SETUP_SECONDS:-0}))
  if [ "$elapsed" -gt "$start_by" ]; then
    echo "test: stage 'sanitize $kind' SKIPPED: $elapsed s gone, later than PSTRAIN_SANITIZER_START_BY=$start_by (a cold compiler cache)"
    skip "sanitize $kind" "time: ${elapsed} s > ${start_by} s"
    continue
  fi
  # A stage that fails before its tests run must not leave an earlier run's logs to be read below.
  case "$kind" in tsan) dir=${TSAN_BUILD_DIR:-build-tsan} ;; *) dir=${ASAN_BUILD_DIR:-build-asan} ;; esac
  rm -f "$dir/Testing/Temporary/LastTest.log" "$dir/Testing/Temporary/LastTestsFailed.log"
  stage "sanitize $kind" deploy/sanitize.sh "$kind"
  slowest "$dir/Testing/Temporary/LastTest.log" "sanitize $kind"
  [ "${results[-1]}" = ok ] || sanitize_failed+=("$kind")
done

# failed_output LOG NUMBER NAME: test NUMBER's part of a ctest log (LastTest.log), its doctest
# failures and sanitizer reports first, then its last lines.
failed_output() {
  local part="$1.test-$2"
  # The exact header and end lines CTest writes ("N/M Test: NAME", "\"NAME\" end time: ..."): one
  # test's name can hold another's. The name goes through the environment (awk -v would read
  # its backslashes as escapes).
  name="$3" awk -v number="$2" '
    index($0, number "/") == 1 && substr($0, index($0, " Test: ") + 7) == ENVIRON["name"] { on = 1 }
    on { print }
    on && index($0, "\"" ENVIRON["name"] "\" end time: ") == 1 { exit }' "$1" > "$part" 2>/dev/null || true
  grep -E -A3 "ERROR|FATAL|failed|Timeout|Exception|Sanitizer" "$part" | head -40
  tail -40 "$part"
}
# The sanitizer stages' failures (their build directories' logs), before the table: not rerun
# (a rerun needs the stage's sanitizer options; the report is already in the output).
for kind in "${sanitize_failed[@]}"; do
  case "$kind" in tsan) dir=${TSAN_BUILD_DIR:-build-tsan} ;; *) dir=${ASAN_BUILD_DIR:-build-asan} ;; esac
  list="$dir/Testing/Temporary/LastTestsFailed.log"
  [ -s "$list" ] || continue
  echo
  echo "test: sanitize $kind: the failed tests' output (failures, then its tail):"
  while IFS=: read -r number name; do
    echo "--- test $number ($name):"
    failed_output "$dir/Testing/Temporary/LastTest.log" "$number" "$name"
  done < "$list"
done
table
# The first run's failures again, last, where a truncated log still shows them: each failed test
# once more with its output's tail (the result above stands whatever this rerun does).
failed_list="${BUILD_DIR:-build}/Testing/Temporary/LastTestsFailed.log"
if [ "${ctest_result:-}" = FAILED ] && [ -s "$failed_list" ]; then
  echo
  echo "test: ctest's failures, run once more:"
  cat "$failed_list"
  while IFS=: read -r number name; do
    # What the failing run printed: its doctest failures first, then the last lines of its output.
    echo "--- test $number ($name), the first run's output (failures, then its tail):"
    failed_output "${BUILD_DIR:-build}/Testing/first-run.log" "$number" "$name"
    echo "--- test $number ($name), rerun:"
    (cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 -I "$number,$number" 2>&1 | tail -40)
  done < "$failed_list"
fi
# Last, in a dozen lines where a log cut in the middle still shows them: what each failed test
# asserted or the sanitizer reported (the sections above have the rest).
summary=$(cat "${BUILD_DIR:-build}"/Testing/first-run.log.test-* "${ASAN_BUILD_DIR:-build-asan}"/Testing/Temporary/LastTest.log.test-* \
            "${TSAN_BUILD_DIR:-build-tsan}"/Testing/Temporary/LastTest.log.test-* 2>/dev/null |
          grep -E -A1 ": ERROR: |FATAL ERROR|^SUMMARY: |WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error:" | head -12)
if [ -n "$summary" ]; then
  echo
  echo "test: the failures in brief:"
  echo "$summary"
fi
exit $failed
