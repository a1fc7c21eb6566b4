#!/usr/bin/env bash
# The main job: gets the datasets, builds, and trains the MNIST MLP of DESIGN section 5
# (784-700-500-10, Adam, batch 128, 3 epochs), printing each epoch and the final test accuracy.
# Usage: deploy/quickstart.sh        (run deploy/setup.sh first, as root)
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/data-dir.sh
deploy/build.sh
exec build/worker/pstrain-train --spec deploy/jobs/mnist-mlp.json --data-dir "$PSTRAIN_DATA_DIR"
