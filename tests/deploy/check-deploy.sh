#!/usr/bin/env bash
# Checks of the deployment files, run by CTest (label "deploy"):
#
#   tests/deploy/check-deploy.sh config          docker-compose accepts deploy/docker-compose.yml;
#                                                yamllint passes on it and on deploy/k8s/; every compose
#                                                service and every Kubernetes container runs a binary that
#                                                accepts its command line and environment (--check-config),
#                                                and sets only PSTRAIN_* variables that binary documents;
#                                                the listening ports of the services differ
#   tests/deploy/check-deploy.sh local-cluster   deploy/local-cluster.sh: `down` leaves no process behind
#                                                and a second `up` finds the jobs of the first
#
# Needs the Debian packages docker-compose and yamllint (they bring python3-yaml, used here), and
# curl. Environment: BUILD_DIR (build directory with the binaries; default ./build), PSTRAIN_DATA_DIR.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$repo/build}
case $build in /*) ;; *) build=$repo/$build ;; esac
py=/usr/bin/python3  # Debian's, which has python3-yaml (a dependency of docker-compose and yamllint)

fail() { echo "check-deploy: FAIL: $*" >&2; exit 1; }
note() { echo "check-deploy: $*"; }
need() {  # command, Debian package
  command -v "$1" >/dev/null || fail "$1 is missing: apt-get install $2 (deploy/setup.sh installs it)"
}

# Variables a service may set before the binary documents them (its support is being added):
# reported, not failed. Empty the list once every binary in the tree documents them.
pending_env=" PSTRAIN_SERVER_DATA_DIR "

binary_path() {  # name in the image (pstrain-coordinator, ...) -> built binary
  case $1 in
    pstrain-coordinator) echo "$build/coordinator/pstrain-coordinator" ;;
    pstrain-server) echo "$build/server/pstrain-server" ;;
    pstrain-worker) echo "$build/worker/pstrain-worker" ;;
    *) return 1 ;;
  esac
}

# Lines "WHERE<TAB>ARGV as JSON<TAB>ENV as JSON" for every compose service (from the normalised
# config) and every Kubernetes container (with $(VAR) references expanded as the kubelet does, the
# downward-API POD_NAME taken as NAME-0).
list_commands() {  # normalised compose file
  "$py" - "$1" "$repo/deploy/k8s" <<'EOF'
import json, os, re, sys, yaml
compose = yaml.safe_load(open(sys.argv[1]))
for name, svc in compose["services"].items():
    argv = (svc.get("entrypoint") or []) + (svc.get("command") or [])
    if isinstance(argv, str):
        argv = argv.split()
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    env = {k: "" if v is None else str(v) for k, v in env.items()}
    print(f"compose service {name}\t{json.dumps(argv)}\t{json.dumps(env)}")
k8s = sys.argv[2]
for fname in sorted(os.listdir(k8s)):
    if not fname.endswith((".yaml", ".yml")) or fname == "kustomization.yaml":
        continue
    for doc in yaml.safe_load_all(open(os.path.join(k8s, fname))):
        if not doc or doc.get("kind") not in ("Deployment", "StatefulSet", "Pod"):
            continue
        spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
        for c in spec.get("containers", []):
            argv = (c.get("command") or []) + (c.get("args") or [])
            if not argv or not argv[0].startswith("pstrain-"):
                continue
            env = {}
            for e in c.get("env", []):
                if "value" in e:
                    env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), str(e["value"]))
                elif "fieldRef" in e.get("valueFrom", {}):
                    env[e["name"]] = doc["metadata"]["name"] + "-0"
            print(f"k8s {fname} {doc['kind']}/{doc['metadata']['name']} container {c['name']}\t"
                  f"{json.dumps(argv)}\t{json.dumps(env)}")
EOF
}

check_config() {
  need docker-compose docker-compose
  need yamllint yamllint
  [ -x "$py" ] && "$py" -c 'import yaml' 2>/dev/null || fail "$py with the yaml module is missing: apt-get install python3-yaml"
  local tmp; tmp=$(mktemp -d)
  (umask 077 && echo "check-deploy-stand-in-cluster-secret" >"$tmp/cluster-secret")
  # shellcheck disable=SC2064  # $tmp is expanded now on purpose
  trap "rm -rf '$tmp'" EXIT

  # 1. docker-compose accepts the file (the dataset directory must exist for the bind mount to make sense).
  source "$repo/deploy/data-dir.sh"
  if ! (cd "$repo/deploy" && PSTRAIN_DATA_DIR=$PSTRAIN_DATA_DIR docker-compose -f docker-compose.yml config) >"$tmp/compose.yml" 2>"$tmp/compose.err"; then
    cat "$tmp/compose.err" >&2; fail "docker-compose config rejects deploy/docker-compose.yml"
  fi
  note "docker-compose config: ok ($(cd "$repo/deploy" && docker-compose -f docker-compose.yml config --services 2>/dev/null | tr '\n' ' '))"

  # 2. yamllint on the compose file and the manifests.
  yamllint -c "$repo/deploy/.yamllint" "$repo/deploy/docker-compose.yml" "$repo/deploy/k8s/" ||
    fail "yamllint finds problems (config deploy/.yamllint)"
  note "yamllint: ok"

  # 3. Every command line and environment is accepted by the binary it names.
  list_commands "$tmp/compose.yml" >"$tmp/commands"
  [ -s "$tmp/commands" ] || fail "no service or container found"
  local where argv_json env_json n=0 ports=""
  while IFS=$'\t' read -r where argv_json env_json; do
    mapfile -t argv < <("$py" -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])))' "$argv_json")
    mapfile -t envs < <("$py" -c 'import json,sys; [print(f"{k}={v}") for k, v in json.loads(sys.argv[1]).items()]' "$env_json")
    # The cluster secret is mounted in the containers (compose secret, Kubernetes Secret): here, a
    # stand-in file at a path of ours, so --check-config reads and checks a real secret file.
    for i in "${!envs[@]}"; do
      [[ ${envs[$i]} == PSTRAIN_CLUSTER_SECRET_FILE=* ]] && envs[$i]="PSTRAIN_CLUSTER_SECRET_FILE=$tmp/cluster-secret"
    done
    local bin; bin=$(binary_path "${argv[0]}") || fail "$where: command '${argv[0]}' is not a pstrain binary"
    [ -x "$bin" ] || fail "$bin is not built (build first: deploy/build.sh)"
    local out
    if ! out=$(env -i PATH=/usr/bin:/bin "${envs[@]}" "$bin" "${argv[@]:1}" --check-config 2>&1) || ! grep -q "configuration ok" <<<"$out"; then
      fail "$where: ${argv[*]} --check-config with env (${envs[*]}) is refused: $out"
    fi
    local help; help=$("$bin" --help)
    for e in "${envs[@]}"; do
      local var=${e%%=*}
      [[ $var == PSTRAIN_* ]] || continue
      if ! grep -Eq "env $var(;|$)" <<<"$help"; then
        if [[ $pending_env == *" $var "* ]]; then
          note "warning: $where sets $var, which ${argv[0]} does not document yet (ignored by this binary)"
        else
          fail "$where sets $var, which ${argv[0]} --help does not document (a typo, or a flag that does not exist)"
        fi
      fi
      # Compose services share one network namespace in deploy/compose-check.sh: ports must differ.
      if [[ $where == compose* && $var == *_LISTEN ]]; then
        local port=${e##*:}
        [[ $ports == *" $port "* ]] && fail "$where listens on port $port like another service"
        ports+=" $port "
      fi
    done
    n=$((n + 1))
    note "$where: ${argv[*]} accepted"
  done <"$tmp/commands"
  note "ok: $n command lines accepted; compose listening ports:$(tr -s ' ' <<<"$ports")"
}

. "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh"  # free_port: a fresh port on every call

# Pids of processes whose working directory is $1: local-cluster.sh starts every process there.
procs_in() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/cwd" 2>/dev/null)" = "$1" ] || continue
    [ "$(awk '{print $3}' "$p/stat" 2>/dev/null)" = Z ] && continue
    echo "${p#/proc/}"
  done
}

check_local_cluster() {
  need curl curl
  local dir; dir=$(mktemp -d /tmp/pstrain-deploy-check.XXXXXX)
  local http_port rpc_port; http_port=$(free_port); rpc_port=$(free_port)
  export LOCAL_CLUSTER_DIR=$dir HTTP_PORT=$http_port RPC_PORT=$rpc_port SERVERS=2 WORKERS=2 BUILD_DIR=$build
  lc=$repo/deploy/local-cluster.sh  # global: the EXIT trap uses it
  local url=http://127.0.0.1:$HTTP_PORT
  trap '"$lc" down >/dev/null 2>&1 || true; rm -rf "$LOCAL_CLUSTER_DIR"' EXIT

  "$lc" up
  # The REST API needs the token the first `up` made (AUTH=1, the default): 401 without it, 403
  # for the viewer's token on a submit; the admin's works.
  [ "$(stat -c %a "$dir/auth/tokens")" = 600 ] || fail "the tokens file is not private (mode $(stat -c %a "$dir/auth/tokens"))"
  local token viewer code
  token=$(cat "$dir/auth/admin-token")
  viewer=$(cat "$dir/auth/viewer-token")
  local auth=(-H "Authorization: Bearer $token")
  code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/jobs")
  [ "$code" = 401 ] || fail "GET /v1/jobs without a token answered $code, not 401"
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $viewer" -H 'Content-Type: application/json' \
    --data '{}' "$url/v1/jobs")
  [ "$code" = 403 ] || fail "POST /v1/jobs with the viewer's token answered $code, not 403"
  code=$(curl -s -o /dev/null -w '%{http_code}' "$url/healthz")
  [ "$code" = 200 ] || fail "GET /healthz without a token answered $code, not 200"
  note "auth: 401 without a token, 403 for a viewer's submit, /healthz open"
  # A short job (the MNIST MLP, one epoch), run to the end.
  local spec id state="" deadline
  spec=$("$py" -c 'import json,sys; s=json.load(open(sys.argv[1])); s["training"]["epochs"]=1; print(json.dumps(s))' \
    "$repo/deploy/jobs/mnist-mlp.json")
  id=$(curl -fsS "${auth[@]}" -H 'Content-Type: application/json' --data "$spec" "$url/v1/jobs" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  deadline=$((SECONDS + 120))
  while [ $SECONDS -lt $deadline ]; do
    state=$(curl -fsS "${auth[@]}" "$url/v1/jobs/$id" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case $state in SUCCEEDED) break ;; FAILED | CANCELLED) fail "job $id $state (logs in $dir)" ;; esac
    sleep 0.5
  done
  [ "$state" = SUCCEEDED ] || fail "job $id still $state after 120 s"
  note "first up: job $id SUCCEEDED"
  ! grep -qF -e "$token" -e "$viewer" "$dir"/*.log || fail "a token appears in a log ($(grep -lF -e "$token" -e "$viewer" "$dir"/*.log))"

  local pids; pids=$(cat "$dir"/*.pid)
  "$lc" down
  local left=""
  for p in $pids; do
    if kill -0 "$p" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ]; then left+=" $p"; fi
  done
  left+=$(procs_in "$dir" | tr '\n' ' ' | sed 's/^/ /; s/ *$//')
  [ -z "${left// /}" ] || fail "processes left after down:$left ($(ps -o pid,cmd -p "${left// /,}" 2>/dev/null | tail -n +2))"
  ! ls "$dir"/*.pid >/dev/null 2>&1 || fail "pid files left after down: $(ls "$dir"/*.pid)"
  ! curl -s -m 2 -o /dev/null "$url/healthz" || fail "something still answers on $url after down"
  note "down: no process left ($(wc -w <<<"$pids") stopped)"

  "$lc" up
  local listed
  listed=$(curl -fsS "${auth[@]}" "$url/v1/jobs" | "$py" -c 'import json,sys; print(" ".join(j["id"] + ":" + j["state"] for j in json.load(sys.stdin)["jobs"]))')
  [[ " $listed " == *" $id:SUCCEEDED "* ]] || fail "second up does not list job $id as SUCCEEDED (lists: $listed)"
  for i in 0 1; do [ -d "$dir/server-$i-data" ] || fail "server-$i has no data directory $dir/server-$i-data"; done
  note "second up: lists $listed (state kept in $dir/coordinator-state, server-N-data)"
  "$lc" down
  [ -z "$(procs_in "$dir")" ] || fail "processes left after the second down: $(procs_in "$dir" | tr '\n' ' ')"
  note "ok"
}

case "${1:-}" in
  config) check_config ;;
  local-cluster) check_local_cluster ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
