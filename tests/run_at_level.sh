#!/usr/bin/env bash
# Runs a test command as a smaller CPU would run it: our kernels and oneDNN capped at LEVEL
# (PSTRAIN_CPU_TARGET, common/engine/simd/cpu_target.h) and OpenBLAS on the kernel set of such a CPU
# (OPENBLAS_CORETYPE), and PyTorch's kernels too (ATEN_CPU_CAPABILITY), for every process the
# command starts. CI runs the equivalence and recovery tests this way at each level below the
# machine's, so a result that holds on one vector width only fails on any machine
# (docs/DESIGN-NOTES.md, "Exactness on every CPU").
#
# Usage: run_at_level.sh LEVEL COMMAND...   LEVEL: x86-64 or x86-64-v3 (x86-64-v4 is the native run)
# Exits 77 (CTest's SKIP_RETURN_CODE) when this CPU cannot run LEVEL's code, saying so.
set -euo pipefail
level=$1
shift
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }
case "$level" in
  x86-64) coretype=Core2 aten=default ;;
  x86-64-v3)
    coretype=Haswell aten=avx2
    for f in avx2 fma bmi2 f16c; do
      if ! has "$f"; then
        echo "run_at_level: this CPU has no $f: it cannot run x86-64-v3 code (skipped)"
        exit 77
      fi
    done
    ;;
  *) echo "run_at_level: unknown level '$level'" >&2; exit 2 ;;
esac
# ATEN_CPU_CAPABILITY caps PyTorch's own kernels the same way (a baseline run under this script).
export PSTRAIN_CPU_TARGET=$level OPENBLAS_CORETYPE=$coretype ATEN_CPU_CAPABILITY=$aten
echo "run_at_level: PSTRAIN_CPU_TARGET=$level OPENBLAS_CORETYPE=$coretype ATEN_CPU_CAPABILITY=$aten"
exec "$@"
