#!/usr/bin/env bash
# Rules of the source tree that the compiler cannot check, each learnt from a failure.
#
# 1. Every cross-thread promise comes from make_cross_thread_paf() (common/base/cross_thread.h): a raw
#    kj::newPromiseAndCrossThreadFulfiller hides the hand-off from ThreadSanitizer, and CI's TSan
#    stage then fails now and then on a race that is not one (docs/SANITIZERS.md has three).
# 2. common/'s libraries depend one way (common/CMakeLists.txt): base includes none of the others;
#    engine only base; data only base and engine; storage only base and engine; rpc no storage.
#    An include against the arrow would make the worker link what it must not (RocksDB) or tie
#    the engine to the data formats.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
status=0
dirs=(common coordinator server worker tests tools)
existing=()
for d in "${dirs[@]}"; do [ -d "$d" ] && existing+=("$d"); done
if hits=$(grep -rn --include='*.h' --include='*.cc' 'newPromiseAndCrossThreadFulfiller' "${existing[@]}" |
          grep -v '^common/base/cross_thread.h:'); then
  echo "source rules: a raw kj cross-thread fulfiller; use make_cross_thread_paf() (common/base/cross_thread.h):" >&2
  echo "$hits" >&2
  status=1
fi
# layer_rule LIBRARY FORBIDDEN-REGEX
layer_rule() {
  local hits
  if hits=$(grep -rnE --include='*.h' --include='*.cc' --include='*.inc' "#include \"common/($2)/" "common/$1"); then
    echo "source rules: common/$1 includes a library it must not depend on (common/CMakeLists.txt):" >&2
    echo "$hits" >&2
    status=1
  fi
}
layer_rule base 'engine|data|storage|rpc'
layer_rule engine 'data|storage|rpc'
layer_rule data 'storage|rpc'
layer_rule storage 'data|rpc'
layer_rule rpc 'storage'
# 3. coordinator/'s rooms depend one way (docs/ARCHITECTURE.md, "The coordinator's rooms"): each
#    includes only the rooms before it in this list, never one after it nor the root (the process:
#    main, node, service, commands), so no two rooms include each other.
if [ -d coordinator ]; then
  rooms=(base store datasets models cluster job study http)
  for i in "${!rooms[@]}"; do
    after=("${rooms[@]:i+1}")
    forbidden='[a-z_]+\.h"'
    [ ${#after[@]} -gt 0 ] && forbidden+="|($(IFS='|'; echo "${after[*]}"))/"
    if hits=$(grep -rnE --include='*.h' --include='*.cc' "#include \"coordinator/($forbidden)" "coordinator/${rooms[$i]}"); then
      echo "source rules: coordinator/${rooms[$i]} includes a room after it or the root (order: ${rooms[*]}):" >&2
      echo "$hits" >&2
      status=1
    fi
  done
fi
# 4. No ';' in a doctest case's name: CTest lists are ';'-separated, so the case registers as two
#    tests that both fail to match (found by CI on a test named "...; resuming ...").
if [ -d tests ] && hits=$(grep -rnE --include='*.cc' 'TEST_CASE\("[^"]*;' tests); then
  echo "source rules: a test case name with ';' (CTest splits it in two):" >&2
  echo "$hits" >&2
  status=1
fi
[ "$status" = 0 ] && echo "source rules: ok"
exit "$status"
