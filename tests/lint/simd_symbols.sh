#!/usr/bin/env bash
# The kernels of common/engine/simd are compiled once per instruction-set level into one binary
# (common/engine/simd/kernels_target.inc). A weak or COMDAT symbol in those objects (an inline function
# or a template instance from a library header) could be merged by the linker across levels, so
# that baseline code ends up calling, say, the AVX-512 copy, which faults on an AVX2 CPU. Each
# level's object may define only its kernel table, everything else with internal linkage.
#
# Usage: simd_symbols.sh OBJECT...
set -euo pipefail
[ $# -gt 0 ] || { echo "simd symbols: no objects given" >&2; exit 1; }
status=0
for obj in "$@"; do
  # Defined symbols that are global (upper-case type letter), other than the table, what a
  # sanitizer adds for it (AddressSanitizer's __odr_asan.<table>), and DW.ref.__gxx_personality_v0:
  # a pointer to libstdc++'s personality routine, the same data in every object (no code of the
  # level's), which ThreadSanitizer's unwinding cleanups need.
  bad=$(nm --defined-only "$obj" | awk '$2 ~ /^([A-Z]|u|v|w)$/ && $3 !~ /^_ZN[^ ]*kTableE$/ && $3 !~ /^__(odr_asan|asan|tsan|ubsan|sancov)/ && $3 != "DW.ref.__gxx_personality_v0" {print}' || true)
  if [ -n "$bad" ]; then
    echo "simd symbols: $obj defines symbols other than its table:" >&2
    echo "$bad" | c++filt >&2
    status=1
  fi
  tables=$(nm --defined-only "$obj" | awk '$3 ~ /^_ZN[^ ]*kTableE$/' | wc -l)
  if [ "$tables" != 1 ]; then
    echo "simd symbols: $obj defines $tables kernel tables (expected 1)" >&2
    status=1
  fi
done
[ "$status" = 0 ] && echo "simd symbols: ok ($# objects)"
exit "$status"
