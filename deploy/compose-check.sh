#!/usr/bin/env bash
# Runs the cluster of deploy/docker-compose.yml for real with podman, without a Docker engine and
# without container networks: every service of the normalised compose file (`docker-compose
# config`) becomes a container with the service's command, environment, volumes, health check,
# restart policy and stop grace period, all in ONE pod created with `--network none`. The service
# names resolve to 127.0.0.1 through a hosts file mounted at /etc/hosts, which works because every
# service listens on its own port. Then:
#   1. submits deploy/jobs/mnist-mlp.json (curl inside the coordinator container), waits for
#      SUCCEEDED and checks the test accuracy (>= MIN_ACCURACY) and the model download;
#   2. submits a longer MLP job, `podman kill`s a worker container that trains it mid-run, and
#      waits for the job to finish anyway (at most KILL_JOB_TIMEOUT s, or STALL_TIMEOUT s without
#      progress);
#   3. removes everything it made: pod, containers, volumes, hosts file (KEEP=1 keeps them).
#
# Usage: deploy/compose-check.sh            (as root; run /work/shared/tools/containers-setup.sh,
#                                            or install podman and a debian:bookworm-slim image)
# Exit status: 0 all passed; 1 a failure (including a second job that did not survive the loss of
# a worker).
# Environment (defaults): IMAGE (pstrain:latest; built with podman from deploy/Dockerfile when
# missing), WORKERS (the compose file's deploy.replicas; like --scale worker=N), PSTRAIN_DATA_DIR
# (../shared/data or ./data: mounted read-only as the dataset volume), MIN_ACCURACY (0.9),
# JOB_TIMEOUT (600), KILL_JOB_TIMEOUT (300), STALL_TIMEOUT (120), LOG_DIR (a temporary directory:
# container logs), KEEP (0), READ_ONLY (0; 1: every container with a read-only root filesystem and no
# tmpfs, as deploy/k8s/ runs them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3  # Debian's: has python3-yaml (a dependency of docker-compose)
image=${IMAGE:-pstrain:latest}
pod=pstrain-check-$$
min_accuracy=${MIN_ACCURACY:-0.9}
log_dir=${LOG_DIR:-$(mktemp -d /tmp/pstrain-compose-check.XXXXXX)}
[ -n "${LOG_DIR:-}" ] && own_log_dir=0 || own_log_dir=1
mkdir -p "$log_dir"
hosts=$log_dir/hosts

say() { echo "compose-check: $*"; }
fail() {
  echo "compose-check: FAIL: $*" >&2
  exit 1
}
for c in podman docker-compose curl; do command -v "$c" >/dev/null || { echo "compose-check: $c is missing" >&2; exit 1; }; done
"$py" -c 'import yaml' 2>/dev/null || { echo "compose-check: $py with python3-yaml is missing" >&2; exit 1; }

containers=()   # names of the containers made, in start order
volumes=()      # podman volumes made
dump_logs() {
  for c in "${containers[@]}"; do
    podman logs "$c" >"$log_dir/$c.log" 2>&1 || true
  done
}
cleanup() {
  local status=$?
  dump_logs
  if [ "${KEEP:-0}" = 1 ]; then
    say "KEEP=1: pod $pod, its containers and volumes (${volumes[*]}) are left; remove with: podman pod rm -f $pod; podman volume rm ${volumes[*]}"
  else
    podman pod rm -f -t 5 "$pod" >/dev/null 2>&1 || true
    for v in "${volumes[@]}"; do podman volume rm -f "$v" >/dev/null 2>&1 || true; done
    rm -f "$hosts"
    say "removed pod $pod, ${#containers[@]} containers, ${#volumes[@]} volumes"
  fi
  # Logs are kept when something failed, when LOG_DIR was given, or with KEEP=1.
  if [ $status -eq 0 ] && [ $own_log_dir = 1 ] && [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$log_dir"
  else
    say "container logs in $log_dir"
  fi
  exit $status
}
trap cleanup EXIT
trap 'echo "compose-check: interrupted (signal)" >&2; exit 130' INT TERM HUP

# ---- The image ------------------------------------------------------------------------------------
if ! podman image exists "$image"; then
  say "image $image missing: building it (podman build --format docker --network host -f deploy/Dockerfile)"
  podman build --format docker --network host -f "$repo/deploy/Dockerfile" -t "$image" "$repo"
fi
say "image $image: $(podman image inspect "$image" --format '{{.Id}}' | cut -c1-12), $(($(podman image inspect "$image" --format '{{.Size}}') / 1000000)) MB"

# ---- The compose file, normalised, as podman run commands -----------------------------------------
source "$repo/deploy/data-dir.sh"
normalised=$log_dir/compose.yml
# The cluster secret (compose `secrets:`): a fresh one, readable by the image's user only.
export PSTRAIN_CLUSTER_SECRET_HOST_FILE=$log_dir/cluster-secret
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$PSTRAIN_CLUSTER_SECRET_HOST_FILE")
chown 10001:10001 "$PSTRAIN_CLUSTER_SECRET_HOST_FILE" 2>/dev/null || chmod 0644 "$PSTRAIN_CLUSTER_SECRET_HOST_FILE"
(cd "$repo/deploy" && PSTRAIN_DATA_DIR=$PSTRAIN_DATA_DIR docker-compose -f docker-compose.yml config) >"$normalised" ||
  fail "docker-compose config rejects deploy/docker-compose.yml"

# One line per container: NAME SERVICE HEALTHY? then the shell-quoted `podman run` arguments. The
# image of every service is replaced by $image (the compose file names pstrain:latest).
plan=$("$py" - "$normalised" "$pod" "$image" "${WORKERS:-}" <<'EOF'
import os, shlex, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
pod, image, workers = sys.argv[2], sys.argv[3], sys.argv[4]
services = cfg["services"]

def seconds(v):  # compose durations: 30s, 1m30s, 500ms
    import re
    total = 0.0
    for n, unit in re.findall(r"([\d.]+)(ms|us|h|m|s)", str(v)):
        total += float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[unit]
    return total

# Start order: dependencies first (depends_on), as compose does.
order, seen = [], set()
def visit(name):
    if name in seen:
        return
    seen.add(name)
    for dep in (services[name].get("depends_on") or {}):
        visit(dep)
    order.append(name)
for name in services:
    visit(name)

for name in order:
    svc = services[name]
    replicas = int(workers) if (workers and name == "worker") else int((svc.get("deploy") or {}).get("replicas", svc.get("scale", 1)))
    for i in range(1, replicas + 1):
        cname = f"{pod}-{name}" + (f"-{i}" if replicas > 1 or "deploy" in svc else "")
        args = ["--pod", pod, "--name", cname, "-v", "HOSTS:/etc/hosts:ro"]
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        for k, v in env.items():
            args += ["--env", f"{k}={'' if v is None else v}"]
        for vol in svc.get("volumes") or []:
            if isinstance(vol, dict):
                src, dst, ro = vol.get("source"), vol["target"], vol.get("read_only", False)
            else:
                parts = vol.split(":")
                src, dst = parts[0], parts[1]
                ro = len(parts) > 2 and "ro" in parts[2].split(",")
            if not src.startswith("/"):
                src = f"{pod}-{src}"  # a named volume: made by the script
            args += ["-v", f"{src}:{dst}" + (":ro" if ro else "")]
        for sec in svc.get("secrets") or []:  # compose secrets are bind mounts at /run/secrets/NAME
            name_ = sec["source"] if isinstance(sec, dict) else sec
            target = sec.get("target", name_) if isinstance(sec, dict) else sec
            target = target if target.startswith("/") else f"/run/secrets/{target}"
            args += ["-v", f"{cfg['secrets'][name_]['file']}:{target}:ro"]
        if svc.get("restart"):
            args += ["--restart", svc["restart"]]
        if svc.get("stop_grace_period"):
            args += ["--stop-timeout", str(int(seconds(svc["stop_grace_period"])))]
        hc = svc.get("healthcheck")
        has_hc = bool(hc and not hc.get("disable"))
        if has_hc:
            test = hc["test"]
            if isinstance(test, list) and test[0] == "CMD":
                import json
                cmd = json.dumps(test[1:])
            elif isinstance(test, list) and test[0] == "CMD-SHELL":
                cmd = test[1]
            else:
                cmd = test if isinstance(test, str) else " ".join(test)
            args += ["--health-cmd", cmd]
            for key, flag in (("interval", "--health-interval"), ("timeout", "--health-timeout"),
                              ("start_period", "--health-start-period")):
                if key in hc:
                    args += [flag, hc[key]]
            if "retries" in hc:
                args += ["--health-retries", str(hc["retries"])]
        if svc.get("entrypoint"):
            ep = svc["entrypoint"]
            ep = ep if isinstance(ep, list) else shlex.split(ep)
            args += ["--entrypoint", __import__("json").dumps(ep)]
        cmd = svc.get("command") or []
        cmd = cmd if isinstance(cmd, list) else shlex.split(cmd)
        if os.environ.get("READ_ONLY") == "1":
            args += ["--read-only", "--read-only-tmpfs=false"]
        args += ["IMAGE"] + cmd
        print(cname, name, "1" if has_hc else "0", " ".join(shlex.quote(a) for a in args))
EOF
)
services=$("$py" -c 'import sys, yaml; print(" ".join(yaml.safe_load(open(sys.argv[1]))["services"]))' "$normalised")
mapfile -t volume_names < <("$py" -c 'import sys, yaml; [print(v) for v in (yaml.safe_load(open(sys.argv[1])).get("volumes") or {})]' "$normalised")

# ---- Pod, hosts file, volumes ---------------------------------------------------------------------
# The pod shares only the network namespace (loopback only: --network none); each container keeps
# its own host name (its id, as with compose), which is what workers' default names are made of.
printf '127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$services" >"$hosts"
chmod 0644 "$hosts"
podman pod create --name "$pod" --network none --share net >/dev/null
say "pod $pod (--network none); hosts: $(head -n1 "$hosts" | tr '\t' ' ')"
for v in "${volume_names[@]}"; do
  podman volume create "$pod-$v" >/dev/null
  volumes+=("$pod-$v")
done
say "volumes: ${volumes[*]}; datasets: $PSTRAIN_DATA_DIR (read-only)"

wait_healthy() {  # container, seconds: `podman healthcheck run` (no systemd timers here)
  local deadline=$((SECONDS + $2))
  until podman healthcheck run "$1" >/dev/null 2>&1; do
    [ "$(podman inspect "$1" --format '{{.State.Running}}')" = true ] || fail "$1 exited: $(podman logs --tail 20 "$1" 2>&1)"
    [ $SECONDS -lt $deadline ] || fail "$1 not healthy after $2 s: $(podman logs --tail 20 "$1" 2>&1)"
    sleep 1
  done
}

coordinator=""
workers=()
while read -r cname service has_hc args <&3; do
  eval "run_args=($args)"
  for i in "${!run_args[@]}"; do
    case ${run_args[$i]} in
      HOSTS:/etc/hosts:ro) run_args[$i]="$hosts:/etc/hosts:ro" ;;
      IMAGE) run_args[$i]=$image ;;
    esac
  done
  # podman logs an error when it cannot set up systemd timers for the health check; the check
  # itself is run below with `podman healthcheck run`.
  podman run -d "${run_args[@]}" </dev/null >/dev/null 2>"$log_dir/$cname.run.err" || { cat "$log_dir/$cname.run.err" >&2; fail "podman run $cname"; }
  containers+=("$cname")
  say "started $cname: $(podman inspect "$cname" --format '{{.Config.Cmd}}' | tr -d '[]') (restart $(podman inspect "$cname" --format '{{.HostConfig.RestartPolicy.Name}}'))"
  [ "$service" = coordinator ] && coordinator=$cname
  [ "$service" = worker ] && workers+=("$cname")
  # depends_on conditions are service_healthy for the coordinator: wait for every health check.
  [ "$has_hc" = 1 ] && wait_healthy "$cname" 90
done 3<<<"$plan"
[ -n "$coordinator" ] || fail "no coordinator service"
say "all ${#containers[@]} containers healthy"

# ---- REST, from inside the pod ---------------------------------------------------------------------
rest() {  # METHOD PATH [file with a JSON body]
  if [ $# -ge 3 ]; then
    podman exec -i "$coordinator" curl -sS -m 20 -X "$1" -H 'Content-Type: application/json' --data-binary @- "http://127.0.0.1:8080$2" <"$3"
  else
    podman exec "$coordinator" curl -sS -m 20 -X "$1" "http://127.0.0.1:8080$2"
  fi
}
field() {  # JSON on stdin, python expression on `j`
  "$py" -c 'import json, sys; j = json.load(sys.stdin); v = eval(sys.argv[1]); print("" if v is None else v)' "$1"
}

deadline=$((SECONDS + 60))
want_workers=${#workers[@]}
until [ "$(rest GET /v1/cluster | field 'sum(1 for n in j["nodes"] if n["alive"])')" -ge $((want_workers + 2)) ]; do
  [ $SECONDS -lt $deadline ] || fail "nodes not registered after 60 s: $(rest GET /v1/cluster)"
  sleep 1
done
say "cluster: $(rest GET /v1/cluster | field '", ".join(n["role"] + " " + n["name"] + ("@" + n["address"] if n["address"] else "") for n in j["nodes"] if n["alive"])')"

follow() {  # job id, timeout s[, stall s] -> prints progress; 0 when the job ended (any state),
            # 1 on timeout or when its step count has not moved for `stall` seconds
  local id=$1 deadline=$((SECONDS + $2)) stall=${3:-0} status last="" line step last_step="" moved=$SECONDS
  while [ $SECONDS -lt $deadline ]; do
    status=$(rest GET "/v1/jobs/$id")
    line=$(field '"%s epoch %s/%s step %s/%s (%.0f%%)" % (j["state"], j["epoch"], j["epochs"], j["step"], j["total_steps"], j["percent"])' <<<"$status")
    [ "$line" != "$last" ] && say "  $id: $line"
    last=$line
    case $(field 'j["state"]' <<<"$status") in SUCCEEDED | FAILED | CANCELLED) return 0 ;; esac
    step=$(field 'j["step"]' <<<"$status")
    [ "$step" != "$last_step" ] && { last_step=$step; moved=$SECONDS; }
    if [ "$stall" -gt 0 ] && [ $((SECONDS - moved)) -ge "$stall" ]; then
      say "  $id: no progress for $stall s"
      return 1
    fi
    sleep 2
  done
  return 1
}

# ---- 1. The MNIST MLP job ---------------------------------------------------------------------------
reply=$(rest POST /v1/jobs "$repo/deploy/jobs/mnist-mlp.json")
job1=$(field 'j["id"]' <<<"$reply") || fail "job refused: $reply"
say "job 1: $job1 (deploy/jobs/mnist-mlp.json)"
follow "$job1" "${JOB_TIMEOUT:-600}" || fail "job $job1 not finished after ${JOB_TIMEOUT:-600} s"
status=$(rest GET "/v1/jobs/$job1")
state=$(field 'j["state"]' <<<"$status")
[ "$state" = SUCCEEDED ] || fail "job $job1 $state: $(field 'j["reason"]' <<<"$status")"
accuracy=$(field 'j["test_accuracy"]' <<<"$status")
"$py" -c "import sys; sys.exit(0 if float('$accuracy') >= $min_accuracy else 1)" ||
  fail "job $job1 test accuracy $accuracy < $min_accuracy"
model_bytes=$(podman exec "$coordinator" sh -c "curl -fsS -m 60 http://127.0.0.1:8080/v1/jobs/$job1/model | wc -c")
[ "$model_bytes" -gt 0 ] || fail "empty model download"
say "job 1 SUCCEEDED: test accuracy $accuracy (>= $min_accuracy); model $model_bytes bytes"

# ---- 2. A worker killed mid-run -----------------------------------------------------------------------
spec2=$log_dir/mnist-mlp-kill.json
"$py" -c 'import json, sys; s = json.load(open(sys.argv[1])); s["name"] = "mnist-mlp-worker-loss"; s["training"]["epochs"] = 4
print(json.dumps(s))' "$repo/deploy/jobs/mnist-mlp.json" >"$spec2"
job2=$(rest POST /v1/jobs "$spec2" | field 'j["id"]') || fail "job 2 refused"
say "job 2: $job2 (MLP, 4 epochs); a worker will be killed during epoch 2"
deadline=$((SECONDS + ${JOB_TIMEOUT:-600}))
while :; do
  status=$(rest GET "/v1/jobs/$job2")
  step=$(field 'j["step"]' <<<"$status") per_epoch=$(field 'j["steps_per_epoch"]' <<<"$status")
  state=$(field 'j["state"]' <<<"$status")
  [ "$state" = RUNNING ] && [ "${per_epoch:-0}" -gt 0 ] && [ "$step" -ge $((per_epoch * 3 / 2)) ] && break
  case $state in SUCCEEDED | FAILED | CANCELLED) fail "job $job2 ended ($state) before a worker could be killed" ;; esac
  [ $SECONDS -lt $deadline ] || fail "job $job2 did not reach epoch 2"
  sleep 0.5
done
# The victim: a worker container that trains this job. A worker's default name is HOSTNAME-PID and a
# container's host name is its id, so the job's worker names lead to the containers.
victim=""
for name in $(field '" ".join(w.get("name", "") for w in j["workers"] if w.get("alive"))' <<<"$status"); do
  for c in "${workers[@]}"; do
    [[ $name == "$(podman inspect "$c" --format '{{.Config.Hostname}}')"-* ]] && { victim=$c; break 2; }
  done
done
[ -n "$victim" ] || fail "no worker container of job $job2 found (job workers: $(field 'j["workers"]' <<<"$status"))"
podman kill "$victim" >/dev/null
say "killed $victim (SIGKILL) at step $step of job $job2 (last backup at step $(field 'j["last_backup_step"] if j["last_backup_step"] is not None else "none"' <<<"$status"))"
sleep 3
say "$victim after the kill: $(podman inspect "$victim" --format '{{.State.Status}}, restarts {{.RestartCount}}')"
worker_loss_failed=0
if ! follow "$job2" "${KILL_JOB_TIMEOUT:-300}" "${STALL_TIMEOUT:-120}"; then
  worker_loss_failed=1
  status=$(rest GET "/v1/jobs/$job2")
  say "FAILURE: job $job2 still $(field 'j["state"]' <<<"$status") at step $(field 'j["step"]' <<<"$status") after a worker was killed (no progress for ${STALL_TIMEOUT:-120} s, or not done in ${KILL_JOB_TIMEOUT:-300} s)"
  rest POST "/v1/jobs/$job2/cancel" >/dev/null || true
else
  status=$(rest GET "/v1/jobs/$job2")
  state=$(field 'j["state"]' <<<"$status")
  if [ "$state" = SUCCEEDED ]; then
    say "job 2 SUCCEEDED after losing $victim: test accuracy $(field 'j["test_accuracy"]' <<<"$status")"
  else
    worker_loss_failed=1
    say "FAILURE: job $job2 $state after a worker was killed: $(field 'j["reason"]' <<<"$status") "
  fi
fi
say "$victim at the end: $(podman inspect "$victim" --format '{{.State.Status}}, restarts {{.RestartCount}}')"

if [ $worker_loss_failed = 1 ]; then
  say "result: job 1 passed; job 2 (worker killed) did not finish"
  exit 1
fi
say "result: all passed"
