#!/usr/bin/env bash
# Builds pstrain and runs its whole test suite through CTest (the CI command), then the fuzz
# targets for a short while each (docs/FUZZING.md).
# Usage: deploy/test.sh [ctest options, e.g. -L unit]
# Environment: PSTRAIN_FUZZ_SECONDS, seconds per fuzz target (default 45; 0 skips fuzzing).
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
