#!/usr/bin/env bash
# Installs every Debian package that building and testing pstrain needs, on Debian bookworm, as root.
# Idempotent: when everything is already installed it says so and changes nothing; otherwise it
# runs `apt-get update` and installs what is missing.
#
# Usage: deploy/setup.sh            (sudo deploy/setup.sh when not root)
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates curl
  libboost1.81-dev          # Asio, Beast, JSON (header-only)
  libcapnp-dev capnproto    # Cap'n Proto RPC and its schema compiler
  librocksdb-dev            # durable state of coordinator and servers
  libeigen3-dev             # tensors and element-wise math
  libopenblas-openmp-dev    # matrix products (OpenMP build: shares one thread pool with our loops)
  libdnnl-dev               # convolutions (oneDNN: code generated at run time for the CPU at hand)
  zlib1g-dev                # gzip'd IDX datasets
  libpng-dev libjpeg62-turbo-dev  # image datasets: PNG and JPEG files decoded (common/data/image_decode.h)
  libzip-dev                # uploaded NumPy .npz datasets (zip archives of .npy arrays)
  libssl-dev                # SHA-256 of dataset files (libcrypto); the REST API over TLS (libssl)
  openssl                   # self-signed certificates (local-cluster.sh TLS=1, tls_tests)
  wrk                       # tests/bench/rest_load.sh (HTTP and HTTPS load)
  python3-numpy             # (dataset_formats_test writes a reference .npz with NumPy itself)
  python3-pandas python3-venv  # the Python client's tests (a virtual environment, DataFrames)
  dataset-fashion-mnist     # the official Fashion-MNIST split (dataset fashion-mnist), read from
                            # /usr/share/datasets/fashion-mnist when the data directory has no copy
  doctest-dev               # unit and integration tests
  clang libclang-rt-dev libomp-dev  # the fuzz targets (libFuzzer, ASan, UBSan; OpenMP for clang), fuzz/run.sh
  docker-compose yamllint   # deploy checks: the compose file normalises, manifests lint clean
  python3-yaml              # (the deploy check reads the compose file with it)
  libjs-chart.js            # Chart.js for the dashboard, embedded into the coordinator at build time
  chromium                  # the dashboard's browser test (headless, driven by puppeteer-core)
  prometheus                # the deploy check that scrapes a local cluster (tests/deploy/prometheus-check.sh)
  libonnx-dev libprotobuf-dev  # ONNX export (common/export/): the ONNX protobuf classes
  python3-onnx              # the ONNX checker in the export test (tests/onnx/run_onnx_test.sh)
  python3-torch             # PyTorch's LSTM and GRU: the reference of the recurrent layers' test
)
# node and npm (the browser test's driver): Debian's nodejs and npm, unless a node with npm is
# already installed (e.g. from NodeSource, whose nodejs package brings npm and conflicts with it).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}; run as root (sudo $0)" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup: done"
