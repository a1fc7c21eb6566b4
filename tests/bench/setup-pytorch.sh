#!/usr/bin/env bash
# setup-pytorch.sh — install the PyTorch baselines used by tests/bench/engine_bench.sh, as described
# in /work/shared/bench/pytorch/README.md: Debian's python3-torch + python3-numpy, and Debian's
# OpenBLAS (OpenMP build) unpacked into /opt/anchors-openblas (system BLAS alternatives untouched).
# Idempotent: skips steps already done. Run as root:  tests/bench/setup-pytorch.sh
# Override the baseline directory with PYTORCH_BENCH_DIR.
set -euo pipefail
PT_DIR=${PYTORCH_BENCH_DIR:-/work/shared/bench/pytorch}
OB_LIB=/opt/anchors-openblas/root/usr/lib/x86_64-linux-gnu/openblas-openmp
[[ $(id -u) -eq 0 ]] || { echo "setup-pytorch.sh: run as root" >&2; exit 1; }
[[ -f $PT_DIR/setup_openblas.sh ]] || { echo "setup-pytorch.sh: $PT_DIR/setup_openblas.sh not found" >&2; exit 1; }

if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends python3-torch python3-numpy ||
    { apt-get update && apt-get install -y --no-install-recommends python3-torch python3-numpy; }
fi

if [[ ! -e $OB_LIB/libblas.so.3 ]]; then
  apt-cache show libopenblas0-openmp >/dev/null 2>&1 || apt-get update
  "$PT_DIR/setup_openblas.sh"
fi

# Check: with openblas_env.sh sourced, torch must load the OpenBLAS copy from /opt.
# shellcheck disable=SC1091
. "$PT_DIR/openblas_env.sh"
/usr/bin/python3 - <<'EOF'
import torch
a = torch.randn(256, 256); a @ a
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l})
print("torch", torch.__version__, "BLAS:", " ".join(libs))
assert any("/opt/anchors-openblas/" in l for l in libs), "torch is not using /opt/anchors-openblas"
EOF
echo "PyTorch baselines ready. In the shell that runs them: . $PT_DIR/openblas_env.sh"
