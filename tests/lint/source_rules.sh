#!/usr/bin/env bash
# Rules of the source tree that the compiler cannot check, each learnt from a failure.
#
# 1. Every cross-thread promise comes from make_cross_thread_paf() (common/cross_thread.h): a raw
#    kj::newPromiseAndCrossThreadFulfiller hides the hand-off from ThreadSanitizer, and CI's TSan
#    stage then fails now and then on a race that is not one (docs/SANITIZERS.md has three).
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
status=0
dirs=(common coordinator server worker tests tools)
existing=()
for d in "${dirs[@]}"; do [ -d "$d" ] && existing+=("$d"); done
if hits=$(grep -rn --include='*.h' --include='*.cc' 'newPromiseAndCrossThreadFulfiller' "${existing[@]}" |
          grep -v '^common/cross_thread.h:'); then
  echo "source rules: a raw kj cross-thread fulfiller; use make_cross_thread_paf() (common/cross_thread.h):" >&2
  echo "$hits" >&2
  status=1
fi
[ "$status" = 0 ] && echo "source rules: ok"
exit "$status"
