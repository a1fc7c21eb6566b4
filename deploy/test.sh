#!/usr/bin/env bash
# Builds pstrain and runs its whole test suite through CTest (the CI command).
# Usage: deploy/test.sh [ctest options, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/data-dir.sh
echo "test: datasets from $PSTRAIN_DATA_DIR"
deploy/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j 2 --timeout 900 "$@"
