#!/usr/bin/env bash
# Runs a pstrain cluster as plain processes on this machine: one coordinator, SERVERS parameter
# servers and WORKERS workers, with logs, pid files and state under LOCAL_CLUSTER_DIR.
#
# Usage:
#   deploy/local-cluster.sh up                 start the cluster (builds first if needed), wait until
#                                              every process is ready and /healthz answers, print the URL
#   deploy/local-cluster.sh down               stop everything it started (SIGTERM, SIGKILL after DOWN_TIMEOUT s)
#   deploy/local-cluster.sh status             list the processes, whether they run, and the REST health
#   deploy/local-cluster.sh demo [SPEC.json]   `up` if needed, submit SPEC (deploy/jobs/mnist-mlp.json)
#                                              with the `pstrain` client, follow it (a line per epoch),
#                                              print the test accuracy, download the
#                                              model to LOCAL_CLUSTER_DIR/models/ID.safetensors; the cluster
#                                              stays up afterwards (stop it with `down`)
#   deploy/local-cluster.sh run SPEC.json      start a cluster that runs SPEC, wait for the job, stop
#   deploy/local-cluster.sh restart NODE       start a server-N or worker-N of a running cluster again
#                                              (after a kill: a preempted node coming back by its name)
#
# Environment (defaults): LOCAL_CLUSTER_DIR (./.cluster), HTTP_PORT (8080), RPC_PORT (7000),
# SERVERS (2), WORKERS (2), WORKER_THREADS (1), WORKER_FLAGS (), AUTH (1: the REST API needs a bearer
# token, see below; 0: open), PSTRAIN_DATA_DIR (../shared/data or
# ./data), BUILD_DIR (build; relative to the repository or absolute), BUILD (1: run deploy/build.sh
# even when the binaries exist), DOWN_TIMEOUT (30), DEMO_TIMEOUT (1800), TLS (0; 1: the REST API
# serves HTTPS only, with a self-signed certificate for 127.0.0.1/localhost made once in
# LOCAL_CLUSTER_DIR/tls/; `curl --cacert LOCAL_CLUSTER_DIR/tls/cert.pem https://...`),
# PSTRAIN_CLUSTER_SECRET_FILE (LOCAL_CLUSTER_DIR/cluster-secret, made with 32 random bytes, mode
# 0600, if missing; `none`: an open cluster). Every process proves the cluster secret on each RPC
# connection (docs/DESIGN-NOTES.md "Cluster credential").
# State survives `down`: the coordinator keeps its jobs in LOCAL_CLUSTER_DIR/coordinator-state and
# server N its backups in LOCAL_CLUSTER_DIR/server-N-data, so a second `up` lists the jobs of the
# first. Delete LOCAL_CLUSTER_DIR (after `down`) to start afresh.
# Tokens: the first `up` writes LOCAL_CLUSTER_DIR/auth/tokens (mode 0600) with a random admin token
# and a random viewer token (auth/admin-token, auth/viewer-token), and the coordinator requires
# one of them on every call but /healthz:
#   export PSTRAIN_TOKEN=$(cat .cluster/auth/admin-token)          # the pstrain client reads it
#   curl -H "Authorization: Bearer $PSTRAIN_TOKEN" http://127.0.0.1:8080/v1/jobs
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cluster_dir=$(mkdir -p "${LOCAL_CLUSTER_DIR:-$repo/.cluster}" && cd "${LOCAL_CLUSTER_DIR:-$repo/.cluster}" && pwd)
case ${BUILD_DIR:-build} in
  /*) bin=$BUILD_DIR ;;
  *) bin="$repo/${BUILD_DIR:-build}" ;;
esac
rpc_port=${RPC_PORT:-7000}
http_port=${HTTP_PORT:-8080}
servers=${SERVERS:-2}
workers=${WORKERS:-2}
url="http://127.0.0.1:$http_port"
# TLS=1: HTTPS with the cluster's self-signed certificate (make_certificate); curl and the CLI
# trust it through --cacert / PSTRAIN_CACERT.
tls_dir="$cluster_dir/tls"
tls_flags=() curl_tls=()
if [ "${TLS:-0}" = 1 ]; then
  url="https://127.0.0.1:$http_port"
  tls_flags=(--tls-cert "$tls_dir/cert.pem" --tls-key "$tls_dir/key.pem")
  curl_tls=(--cacert "$tls_dir/cert.pem")
  export PSTRAIN_CACERT="$tls_dir/cert.pem"
fi

say() { echo "local-cluster: $*"; }

# The cluster secret every process reads from PSTRAIN_CLUSTER_SECRET_FILE (exported, so the
# coordinator, servers and workers started below all get it).
secret_file=${PSTRAIN_CLUSTER_SECRET_FILE:-$cluster_dir/cluster-secret}
use_cluster_secret() {
  if [ "$secret_file" = none ]; then
    unset PSTRAIN_CLUSTER_SECRET_FILE
    say "no cluster secret (PSTRAIN_CLUSTER_SECRET_FILE=none): anyone who reaches the RPC ports may join"
    return 0
  fi
  if [ ! -s "$secret_file" ]; then
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$secret_file")
    say "made a cluster secret in $secret_file (mode 0600)"
  fi
  export PSTRAIN_CLUSTER_SECRET_FILE=$secret_file
}
die() { echo "local-cluster: $*" >&2; exit 1; }

# Processes start in the cluster directory, so a relative default of a binary (e.g. a data
# directory) lands there and not in the caller's directory; paths handed to them are absolute.
# The previous log of a name is kept as NAME.log.prev.
start() {  # name, command...
  local name=$1; shift
  [ -f "$cluster_dir/$name.log" ] && mv -f "$cluster_dir/$name.log" "$cluster_dir/$name.log.prev"
  (cd "$cluster_dir" && exec "$@") >"$cluster_dir/$name.log" 2>&1 &
  echo $! >"$cluster_dir/$name.pid"
}

# A pid file names one of our processes only while that pid runs a pstrain binary: a stale file
# (after a reboot, or a process that died) must not make us signal an unrelated process.
ours() {  # pid
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ] || return 1
  { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -q pstrain-
}

running() {  # name
  [ -f "$cluster_dir/$1.pid" ] && ours "$(cat "$cluster_dir/$1.pid")"
}

wait_ready() {  # name, seconds
  local deadline=$((SECONDS + $2))
  until grep -q PSTRAIN_READY "$cluster_dir/$1.log" 2>/dev/null; do
    if ! kill -0 "$(cat "$cluster_dir/$1.pid")" 2>/dev/null; then
      echo "local-cluster: $1 exited during start-up; its log:" >&2; tail -20 "$cluster_dir/$1.log" >&2; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then echo "local-cluster: $1 not ready after $2 s" >&2; return 1; fi
    sleep 0.1
  done
}

wait_healthy() {  # seconds: GET /healthz answers 200
  local deadline=$((SECONDS + $1))
  until curl -fsS -m 2 "${curl_tls[@]}" -o /dev/null "$url/healthz" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then echo "local-cluster: $url/healthz does not answer after $1 s" >&2; return 1; fi
    sleep 0.2
  done
}

# TLS=1: a self-signed certificate (EC P-256, 10 years) for 127.0.0.1 and localhost, made once and
# kept with the cluster (delete LOCAL_CLUSTER_DIR/tls for a new one).
make_certificate() {
  [ "${TLS:-0}" = 1 ] || return 0
  [ -s "$tls_dir/cert.pem" ] && [ -s "$tls_dir/key.pem" ] && return 0
  command -v openssl >/dev/null || die "TLS=1 needs the openssl command (apt-get install openssl)"
  mkdir -p "$tls_dir" && chmod 700 "$tls_dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -subj "/CN=pstrain local cluster" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$tls_dir/key.pem" -out "$tls_dir/cert.pem" 2>/dev/null ||
    die "openssl could not make a certificate in $tls_dir"
  chmod 600 "$tls_dir/key.pem"
  say "made a self-signed certificate for 127.0.0.1/localhost: $tls_dir/cert.pem"
}

build_if_needed() {
  if [ "${BUILD:-0}" = 1 ] || [ ! -x "$bin/coordinator/pstrain-coordinator" ] || [ ! -x "$bin/server/pstrain-server" ] ||
    [ ! -x "$bin/worker/pstrain-worker" ] || [ ! -x "$bin/cli/pstrain" ]; then
    BUILD_DIR=$bin "$repo/deploy/build.sh"
  fi
}

start_server() {  # index
  # Each server has its own backup directory (env, so binaries without --data-dir ignore it) and a
  # fixed name: a restarted server is recognised by its name.
  PSTRAIN_SERVER_DATA_DIR="$cluster_dir/server-$1-data" \
    start "server-$1" "$bin/server/pstrain-server" --listen 127.0.0.1:0 --coordinator "127.0.0.1:$rpc_port" --name "server-$1"
}

start_worker() {  # index
  start "worker-$1" "$bin/worker/pstrain-worker" --coordinator "127.0.0.1:$rpc_port" --name "worker-$1" \
    --threads "${WORKER_THREADS:-1}" ${WORKER_FLAGS:-}
}

start_nodes() {
  for i in $(seq 0 $((servers - 1))); do start_server "$i"; done
  for i in $(seq 0 $((workers - 1))); do start_worker "$i"; done
  for i in $(seq 0 $((servers - 1))); do wait_ready "server-$i" 30; done
  for i in $(seq 0 $((workers - 1))); do wait_ready "worker-$i" 30; done
}

# Stops every process with a pid file: SIGTERM to all (workers, servers, then the coordinator, so
# the coordinator sees the nodes leave), wait up to DOWN_TIMEOUT s for a clean exit (servers may
# write a backup), then SIGKILL what is left.
down() {
  local pids=() names=() f pid
  for f in "$cluster_dir"/worker-*.pid "$cluster_dir"/server-*.pid "$cluster_dir"/coordinator.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if ours "$pid"; then
      kill -TERM "$pid" 2>/dev/null && { pids+=("$pid"); names+=("$(basename "$f" .pid)"); }
    fi
    rm -f "$f"
  done
  local deadline=$((SECONDS + ${DOWN_TIMEOUT:-30})) alive
  while :; do
    alive=0
    for pid in "${pids[@]}"; do ours "$pid" && alive=1; done
    [ $alive -eq 0 ] && break
    [ $SECONDS -ge $deadline ] && break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if ours "${pids[$i]}"; then
      echo "local-cluster: ${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${DOWN_TIMEOUT:-30} s: SIGKILL" >&2
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  # `run` started them as children of this shell: reap them.
  wait 2>/dev/null || true
}

# First value of a top-level key of the job JSON on stdin (the status object lists its scalar
# fields before the nested ones). Strings without quotes; empty for null or a missing key.
json_get() {  # key
  grep -o "\"$1\": *\(\"[^\"]*\"\|[^,}\"]*\)" | head -n1 | sed "s/^\"$1\": *//; s/^\"//; s/\"$//; s/^null$//"
}

# The tokens file (AUTH=1): made once, kept across `down`/`up`.
auth_dir=$cluster_dir/auth
ensure_tokens() {
  [ "${AUTH:-1}" = 1 ] || return 0
  [ -s "$auth_dir/tokens" ] && return 0
  (umask 077 && mkdir -p "$auth_dir")
  local admin viewer
  admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  viewer=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  (umask 077
    printf '# pstrain REST API tokens (TOKEN,ROLE,NAME), made by deploy/local-cluster.sh\n%s,admin,local-admin\n%s,viewer,local-viewer\n' \
      "$admin" "$viewer" >"$auth_dir/tokens"
    printf '%s\n' "$admin" >"$auth_dir/admin-token"
    printf '%s\n' "$viewer" >"$auth_dir/viewer-token")
}
auth_args=()
[ "${AUTH:-1}" = 1 ] && auth_args=(--auth-tokens-file "$auth_dir/tokens")
say_auth() {
  if [ "${AUTH:-1}" = 1 ]; then
    say "the REST API needs a token: export PSTRAIN_TOKEN=\$(cat $auth_dir/admin-token)"
    say "  then: curl -H \"Authorization: Bearer \$PSTRAIN_TOKEN\" $url/v1/jobs   (dashboard: $url/, paste the token)"
  else
    say "AUTH=0: the REST API is open to anyone who can reach $url"
  fi
}

up() {
  if running coordinator; then
    say "already up; REST API at $url (logs in $cluster_dir)"
    return 0
  fi
  down  # leftovers of a cluster whose coordinator died
  build_if_needed
  use_cluster_secret
  make_certificate
  if curl -s -k -m 2 -o /dev/null "$url/healthz" 2>/dev/null; then
    die "something already answers on $url: set HTTP_PORT (and RPC_PORT) to free ports"
  fi
  ensure_tokens
  start coordinator "$bin/coordinator/pstrain-coordinator" --listen "127.0.0.1:$rpc_port" --http "127.0.0.1:$http_port" \
    --state-dir "$cluster_dir/coordinator-state" --data-dir "$PSTRAIN_DATA_DIR" --datasets-dir "$cluster_dir/datasets" \
    "${auth_args[@]}" "${tls_flags[@]}"
  wait_ready coordinator 30 || { down; return 1; }
  wait_healthy 30 || { down; return 1; }
  start_nodes || { down; return 1; }
  say "up: coordinator, $servers servers, $workers workers; REST API at $url (logs in $cluster_dir)"
  if [ "${TLS:-0}" = 1 ]; then
    say "HTTPS with a self-signed certificate: curl --cacert $tls_dir/cert.pem $url/healthz"
    say "the CLI: PSTRAIN_URL=$url PSTRAIN_CACERT=$tls_dir/cert.pem $bin/cli/pstrain list"
  fi
  say_auth
}

demo() {
  local spec=${1:-$repo/deploy/jobs/mnist-mlp.json}
  [ -f "$spec" ] || die "no job spec $spec"
  up
  local cli="$bin/cli/pstrain"
  [ -x "$cli" ] || BUILD_DIR=$bin "$repo/deploy/build.sh"
  # The command-line client (cli/): exit codes 0 SUCCEEDED, 1 FAILED or refused, 3 CANCELLED,
  # 4 coordinator unreachable.
  export PSTRAIN_URL=$url
  [ "${AUTH:-1}" = 1 ] && { PSTRAIN_TOKEN=$(cat "$auth_dir/admin-token"); export PSTRAIN_TOKEN; }
  say "submitting $spec to $url/v1/jobs"
  local id status=0
  id=$("$cli" submit "$spec") || die "the job was not accepted (see above)"
  say "job $id submitted; following it (pstrain follow $id; its status: pstrain status $id)"
  # A progress bar on a terminal, one line per epoch; gives up if it does not end in DEMO_TIMEOUT.
  timeout --foreground "${DEMO_TIMEOUT:-1800}" "$cli" follow "$id" || status=$?
  if [ $status = 124 ]; then
    die "job $id did not end within ${DEMO_TIMEOUT:-1800} s (cluster left up)"
  fi
  if [ $status != 0 ]; then
    say "job $id did not succeed (pstrain exit code $status): $("$cli" --json status "$id" | json_get reason)"
    say "the cluster is still up (REST API at $url); stop it with: LOCAL_CLUSTER_DIR=$cluster_dir $0 down"
    return 1
  fi
  local status_json
  status_json=$("$cli" --json status "$id")
  if [ -n "$(printf '%s' "$status_json" | json_get test_mae)" ]; then  # a regression job
    say "job $id SUCCEEDED: final test MAE $(printf '%.4f' "$(printf '%s' "$status_json" | json_get test_mae)"), R^2 $(printf '%.4f' "$(printf '%s' "$status_json" | json_get test_r2)")"
  else
    say "job $id SUCCEEDED: final test accuracy $(printf '%.4f' "$(printf '%s' "$status_json" | json_get test_accuracy)")"
  fi
  mkdir -p "$cluster_dir/models"
  local model="$cluster_dir/models/$id.safetensors"
  "$cli" download "$id" -o "$model" >/dev/null || die "cannot download the model of $id"
  say "model written to $model ($(stat -c %s "$model") bytes, safetensors; also at $url/v1/jobs/$id/model)"
  say "the cluster is still up (REST API at $url); stop it with: LOCAL_CLUSTER_DIR=$cluster_dir $0 down"
}

source "$repo/deploy/data-dir.sh"
PSTRAIN_DATA_DIR=$(cd "$PSTRAIN_DATA_DIR" && pwd)
case "${1:-}" in
  up)
    up
    ;;
  down)
    down
    say "down"
    ;;
  status)
    any=0
    for f in "$cluster_dir"/coordinator.pid "$cluster_dir"/server-*.pid "$cluster_dir"/worker-*.pid; do
      [ -e "$f" ] || continue
      any=1
      name=$(basename "$f" .pid)
      if ours "$(cat "$f")"; then echo "$name: running (pid $(cat "$f"))"; else echo "$name: stopped"; fi
    done
    [ $any = 1 ] || { say "nothing running"; exit 0; }
    if curl -fsS -m 2 "${curl_tls[@]}" -o /dev/null "$url/healthz" 2>/dev/null; then echo "REST API: $url (healthy)"; else echo "REST API: $url (not answering)"; fi
    ;;
  demo)
    demo "${2:-}"
    ;;
  run)
    spec=${2:?usage: local-cluster.sh run SPEC.json}
    spec=$(cd "$(dirname "$spec")" && pwd)/$(basename "$spec")
    save_params=${SAVE_PARAMS:+$(cd "$(dirname "$SAVE_PARAMS")" && pwd)/$(basename "$SAVE_PARAMS")}
    build_if_needed
    use_cluster_secret
    make_certificate
    trap down EXIT
    ensure_tokens
    start coordinator "$bin/coordinator/pstrain-coordinator" --listen "127.0.0.1:$rpc_port" --http "127.0.0.1:$http_port" \
      --state-dir "$cluster_dir/coordinator-state" --data-dir "$PSTRAIN_DATA_DIR" --datasets-dir "$cluster_dir/datasets" \
      "${tls_flags[@]}" --job "$spec" --exit-when-done ${save_params:+--save-params "$save_params"} "${auth_args[@]}"
    wait_ready coordinator 30
    start_nodes
    status=0
    wait "$(cat "$cluster_dir/coordinator.pid")" || status=$?
    grep -E '^(epoch|final|job)' "$cluster_dir/coordinator.log" || true
    exit $status
    ;;
  restart)
    node=${2:?usage: local-cluster.sh restart server-N|worker-N}
    running "$node" && die "$node is running"
    use_cluster_secret
    case $node in
      server-[0-9]*) start_server "${node#server-}" ;;
      worker-[0-9]*) start_worker "${node#worker-}" ;;
      *) die "restart takes server-N or worker-N, not '$node'" ;;
    esac
    wait_ready "$node" 30
    say "restarted $node"
    ;;
  *)
    sed -n '2,36p' "$0"; exit 2 ;;
esac
