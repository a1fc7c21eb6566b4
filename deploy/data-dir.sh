# Sourced by the scripts: sets PSTRAIN_DATA_DIR to a directory holding the datasets, preferring
# an explicit PSTRAIN_DATA_DIR, then ../shared/data beside the repository, then ./data (filled by
# deploy/fetch-data.sh when incomplete).
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${PSTRAIN_DATA_DIR:-}" ]; then
  if [ -f "$repo_root/../shared/data/mnist10k-train-images-idx3-ubyte.gz" ]; then
    PSTRAIN_DATA_DIR=$(cd "$repo_root/../shared/data" && pwd)
  else
    PSTRAIN_DATA_DIR="$repo_root/data"
    "$repo_root/deploy/fetch-data.sh" "$PSTRAIN_DATA_DIR"
  fi
fi
export PSTRAIN_DATA_DIR
