#!/usr/bin/env bash
# Builds pstrain and runs its whole test suite through CTest (the CI command), then the fuzz
# targets for a short while each (docs/FUZZING.md), then, when asked, the suite again under the
# sanitizers (docs/SANITIZERS.md): AddressSanitizer + UndefinedBehaviorSanitizer on every test,
# ThreadSanitizer on the unit and in-process tests, each in a build directory of its own.
# Usage: deploy/test.sh [ctest options, e.g. -L unit; they apply to the first run only]
# Environment: PSTRAIN_FUZZ_SECONDS, seconds per fuzz target (default 45; 0 skips fuzzing);
#   PSTRAIN_SANITIZERS, which sanitizer runs to add ("asan tsan" for both; default none: two
#   more builds of the whole code do not fit CI's time budget on 2 cores, docs/SANITIZERS.md).
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

for kind in ${PSTRAIN_SANITIZERS:-}; do
  deploy/sanitize.sh "$kind"
done
