#!/usr/bin/env bash
# Configures (Release, Ninja) and builds pstrain into ./build, using ccache when present.
# Usage: deploy/build.sh [extra cmake -D options]     Environment: BUILD_DIR (default build), JOBS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if [ ! -f "$build_dir/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$build_dir" -j "${JOBS:-2}"
