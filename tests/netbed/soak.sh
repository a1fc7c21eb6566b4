#!/usr/bin/env bash
# soak.sh [ROUNDS]: every netbed test case ROUNDS times (default 5), one after the other, logs of
# failed rounds kept (PSTRAIN_KEEP_LOGS=1: the harness prints their /tmp/pstrain-it-* directory).
# Root only. BUILD_DIR (default build) is the build tree; PSTRAIN_DATA_DIR as for ctest
# (source deploy/data-dir.sh). docs/TESTBED.md says what each case asserts.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
rounds="${1:-5}"
"$here/netbed.sh" check || exit $?
binary="$build/tests/netbed_tests"
[[ -x "$binary" ]] || { echo "soak: build netbed_tests first (ninja -C $build netbed_tests)" >&2; exit 2; }
export PSTRAIN_KEEP_LOGS=1
mapfile -t cases < <("$binary" --list-test-cases --no-intro 2>/dev/null | grep '^netbed - ')
declare -A passed failed
for ((r = 1; r <= rounds; ++r)); do
  for c in "${cases[@]}"; do
    start=$(date +%s)
    if "$binary" "--test-case=${c//,/\\,}" >"/tmp/netbed-soak-last.log" 2>&1; then
      passed[$c]=$(( ${passed[$c]:-0} + 1 )); verdict=ok
    else
      failed[$c]=$(( ${failed[$c]:-0} + 1 )); verdict=FAILED
      cp /tmp/netbed-soak-last.log "/tmp/netbed-soak-r$r-$(echo "$c" | tr -c 'a-z0-9' '_' | cut -c1-40).log"
    fi
    echo "round $r: $verdict ($(( $(date +%s) - start )) s) $c"
  done
done
echo "---"
status=0
for c in "${cases[@]}"; do
  echo "${passed[$c]:-0} passed, ${failed[$c]:-0} failed: $c"
  [[ ${failed[$c]:-0} -eq 0 ]] || status=1
done
exit $status
