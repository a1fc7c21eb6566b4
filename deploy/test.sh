#!/usr/bin/env bash
# Builds pstrain and runs its whole test suite through CTest (the CI command), then the fuzz
# targets for a short while each (docs/FUZZING.md), then the unit and in-process tests again
# under the sanitizers (docs/SANITIZERS.md): ThreadSanitizer, then AddressSanitizer +
# UndefinedBehaviorSanitizer, each in a build directory of its own.
# Usage: deploy/test.sh [ctest options, e.g. -L unit; they apply to the first run only]
# Environment: PSTRAIN_FUZZ_SECONDS, seconds per fuzz target (default 45; 0 skips fuzzing);
#   PSTRAIN_SANITIZERS, the sanitizer runs (deploy/sanitize.sh kinds; default "tsan asan-core";
#   "asan" is AddressSanitizer on the whole suite, longer than CI's budget; empty skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/data-dir.sh
echo "test: datasets from $PSTRAIN_DATA_DIR"
deploy/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j 2 --timeout 900 "$@")

# 45 s per target keeps the fuzz step (a clang build of the targets, about 3 CPU-minutes, then 6
# runs) within about 7 minutes on 2 cores (docs/FUZZING.md); fuzz/run.sh fails on any crash and
# leaves the input in build-fuzz/crashes/.
fuzz_seconds=${PSTRAIN_FUZZ_SECONDS:-45}
if [ "$fuzz_seconds" -gt 0 ]; then
  fuzz/run.sh "$fuzz_seconds"
else
  echo "test: fuzzing skipped (PSTRAIN_FUZZ_SECONDS=0)"
fi

for kind in ${PSTRAIN_SANITIZERS-tsan asan-core}; do
  deploy/sanitize.sh "$kind"
done
