# levels.sh — sourced by the benchmark scripts: run ours and PyTorch as a CPU of a given
# instruction-set level runs them, and print the machine with every table.
#
# bench_level LEVEL   LEVEL: native (what the CPU has), x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA)
#                     or x86-64 (SSE2). Exports, for every process started after it:
#   PSTRAIN_CPU_TARGET   our kernels' level (common/engine/simd/cpu_target.h; it also caps our oneDNN)
#   OPENBLAS_CORETYPE    OpenBLAS's kernel set, for ours and PyTorch (SkylakeX, Haswell, Core2)
#   ATEN_CPU_CAPABILITY  PyTorch's own kernels (avx512, avx2, default)
#   ONEDNN_MAX_CPU_ISA, DNNL_MAX_CPU_ISA   PyTorch's oneDNN (AVX512_CORE, AVX2, SSE41)
# A level above the CPU's is refused.
bench_level() {
  local level=$1 flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  has() { [[ " $flags " == *" $1 "* ]]; }
  case $level in
    native) ;;
    x86-64-v4)
      has avx512f || { echo "this CPU has no AVX-512: it cannot run $level" >&2; return 1; }
      export PSTRAIN_CPU_TARGET=$level OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512 \
        ONEDNN_MAX_CPU_ISA=AVX512_CORE DNNL_MAX_CPU_ISA=AVX512_CORE ;;
    x86-64-v3)
      has avx2 && has fma || { echo "this CPU has no AVX2/FMA: it cannot run $level" >&2; return 1; }
      export PSTRAIN_CPU_TARGET=$level OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 \
        ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 ;;
    x86-64)
      export PSTRAIN_CPU_TARGET=$level OPENBLAS_CORETYPE=Core2 ATEN_CPU_CAPABILITY=default \
        ONEDNN_MAX_CPU_ISA=SSE41 DNNL_MAX_CPU_ISA=SSE41 ;;
    *) echo "unknown level '$level' (native, x86-64-v4, x86-64-v3, x86-64)" >&2; return 1 ;;
  esac
}

# bench_machine BINARY: the CPU's model and flags (lscpu), the level asked for, and what BINARY
# (a pstrain binary) computes with at that level.
bench_machine() {
  echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')"
  echo "cpu flags: $(lscpu | sed -n 's/^Flags:[[:space:]]*//p')"
  echo "level: ${PSTRAIN_CPU_TARGET:-native}$(env | grep -E '^(OPENBLAS_CORETYPE|ATEN_CPU_CAPABILITY|ONEDNN_MAX_CPU_ISA)=' | tr '\n' ' ' | sed 's/^/ (/; s/ $/)/')"
  if [[ -x $1 ]]; then
    echo "pstrain computes with: $("$1" --describe-compute 2>/dev/null || echo '?')"
  fi
}
