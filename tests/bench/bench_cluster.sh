# Sourced by the benchmark scripts that run on a local cluster (deploy/local-cluster.sh):
#   bench_cluster_up NAME   makes $work (/tmp/NAME.XXXXXX), prints the CPU (lscpu model and the
#                           flags that matter), starts the cluster (SERVERS, WORKERS, HTTP_PORT,
#                           RPC_PORT from the caller's environment; auth on) with its data directory
#                           in $work, exports PSTRAIN_TOKEN, and on exit stops it and deletes $work
#                           (KEEP=1 keeps it).
# Needs ROOT (the repository) set by the caller.
bench_cluster_up() {
  work=$(mktemp -d "/tmp/$1.XXXXXX")
  echo "$1: files in $work"
  lscpu | grep -E '^Model name' || true
  lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' '; echo
  export BUILD=0 AUTH=1 LOCAL_CLUSTER_DIR=$work/cluster PSTRAIN_DATA_DIR=$work/data
  mkdir -p "$PSTRAIN_DATA_DIR"
  trap '"$ROOT/deploy/local-cluster.sh" down >"$work/down.log" 2>&1 || true; [ "${KEEP:-0}" = 1 ] || rm -rf "$work"' EXIT
  "$ROOT/deploy/local-cluster.sh" up >"$work/up.log" 2>&1
  PSTRAIN_TOKEN=$(cat "$LOCAL_CLUSTER_DIR/auth/admin-token")
  export PSTRAIN_TOKEN
}
