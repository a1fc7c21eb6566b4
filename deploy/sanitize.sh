#!/usr/bin/env bash
# Builds pstrain with a sanitizer in a build directory of its own and runs tests under it
# (docs/SANITIZERS.md):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (with LeakSanitizer), the whole suite,
#         build-asan/;
#   tsan  ThreadSanitizer, the unit and in-process tests (a whole cluster as threads of one
#         process), build-tsan/.
#   asan-core  AddressSanitizer + UndefinedBehaviorSanitizer on what tsan runs (the unit and
#         in-process tests): the part of the asan run that fits CI's time (deploy/test.sh),
#         build-asan/ as well.
# Any finding fails the test that ran into it; the report is in the test's output.
# Usage: deploy/sanitize.sh asan|asan-core|tsan [ctest options]
# Environment: ASAN_BUILD_DIR / TSAN_BUILD_DIR, JOBS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: deploy/sanitize.sh asan|asan-core|tsan [ctest options]}
shift
source deploy/data-dir.sh
supp=$PWD/tests/sanitizers
# What the unit and in-process tests need (worker_unit_tests runs pstrain-train; the unit tests
# check each binary's --help and --check-config).
core_targets=(common_unit_tests server_unit_tests worker_unit_tests coordinator_unit_tests
              data_path_tests job_runner_tests integration_harness_tests cli_unit_tests
              pstrain-train pstrain-coordinator pstrain-server pstrain-worker)
# (Not the levels label: the exactness tests again at smaller CPU levels are for the release build.
# Nor the "tcp: " entries: the recovery tests again by loopback TCP instead of same-host sockets,
# the same code under the sanitizers but for the socket's kind, and 164 s under TSan.)
core_labels=(-L 'unit|inprocess' -LE levels -E '^tcp: ')
case "$kind" in
  asan|asan-core)
    dir=${ASAN_BUILD_DIR:-build-asan}
    sanitize="address,undefined"
    if [ "$kind" = asan ]; then
      targets=(all)
      labels=()
    else
      targets=("${core_targets[@]}")
      labels=("${core_labels[@]}")
    fi
    # Child processes (the integration tests' nodes) inherit these.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
    ;;
  tsan)
    dir=${TSAN_BUILD_DIR:-build-tsan}
    sanitize="thread"
    targets=("${core_targets[@]}")
    labels=("${core_labels[@]}")
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$supp/tsan.supp"
    ;;
  *) echo "sanitize: unknown kind '$kind' (asan, asan-core or tsan)" >&2; exit 2 ;;
esac

start=$(date +%s)
if [ ! -f "$dir/build.ninja" ]; then
  # Not -march=native: a report should reproduce on any machine.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPSTRAIN_NATIVE=OFF \
    -DPSTRAIN_SANITIZE="$sanitize" >/dev/null
fi
cmake --build "$dir" -j "${JOBS:-2}" --target "${targets[@]}"
built=$(date +%s)
echo "sanitize: $kind built in $(( built - start )) s"
# The timeout is generous: sanitized code runs 2-10x slower.
(cd "$dir" && ctest --output-on-failure -j 2 --timeout 1800 "${labels[@]}" "$@")
echo "sanitize: $kind tests ran in $(( $(date +%s) - built )) s"
