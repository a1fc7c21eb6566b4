#!/usr/bin/env bash
# The main job: gets the datasets, builds, starts a local cluster (1 coordinator, 2 parameter
# servers, 2 workers, as processes on this machine) and trains the MNIST MLP of
# deploy/jobs/mnist-mlp.json on it (784-700-500-10, Adam, global batch 128, sync, 3 epochs),
# printing each epoch and the final test accuracy and where the model was written. The cluster
# stays up afterwards (deploy/local-cluster.sh down stops it).
# Usage: deploy/quickstart.sh        (run deploy/setup.sh first, as root)
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/data-dir.sh
deploy/build.sh
exec deploy/local-cluster.sh demo
