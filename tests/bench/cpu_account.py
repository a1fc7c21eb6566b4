#!/usr/bin/python3
"""cpu_account.py: where a sync cluster's CPU goes, against the standalone trainer's, on one job.

Runs the same job spec (a) with `pstrain-train --threads 1` and (b) as a cluster of W workers x S
servers (deploy/local-cluster.sh run, 1 compute thread per worker), and samples the CPU time
(user + system, /proc/PID/stat) of every pstrain process of each run every 0.1 s, keeping the last
value seen per process. It prints CPU-seconds per 1,000 examples trained, per role, and the
ratio of the cluster's total to the trainer's.

Why this figure: on a machine with C cores, a run whose processes together need R times the
trainer's CPU per example cannot go faster than C / R times the trainer, however well it
overlaps. Unlike samples/s, CPU time per example barely moves when other work shares the
machine, so it says where the time goes even on a busy machine (docs/BENCHMARKS.md, "Where the
cluster's CPU goes"). Evaluation and start-up are included on both sides (same epochs, same
test split).

Usage: tests/bench/cpu_account.py SPEC [--workers 2] [--servers 2] [--data-dir DIR]
           [--build DIR] [--port-base 19400] [--worker-flags '...']
SPEC is a job spec (its training.mode, workers and servers are overridden for the cluster run).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICK = os.sysconf("SC_CLK_TCK")


def sample_run(cmd, cwd_prefix, env=None):
    """Runs cmd; returns ({pid: (role, cpu_seconds)}, output)."""
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    seen = {}
    while True:
        done = proc.poll() is not None
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                argv0 = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")[0]
                name = os.path.basename(argv0.decode(errors="replace"))
                if not name.startswith("pstrain-"):
                    continue
                if not os.readlink(f"/proc/{d}/cwd").startswith(cwd_prefix):
                    continue
                fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
                seen[d] = (name, (int(fields[11]) + int(fields[12])) / TICK)
            except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
                pass
        if done:
            break
        time.sleep(0.1)
    out.seek(0)
    text = out.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"cpu_account: {' '.join(cmd)} failed ({proc.returncode}):\n{text[-3000:]}")
    return seen, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--data-dir", default=os.environ.get("PSTRAIN_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--port-base", type=int, default=19400)
    ap.add_argument("--worker-flags", default="")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    if not build.startswith(ROOT + "/"):
        sys.exit("cpu_account: --build must be inside the repository (local-cluster.sh takes it relative)")
    spec = json.load(open(a.spec))
    work = tempfile.mkdtemp(prefix="cpu_account.")
    t = spec["training"]

    # (a) the trainer, 1 thread.
    single = json.loads(json.dumps(spec))
    single["training"].update(mode="sync", workers=1, servers=1)
    single.pop("backup", None)
    json.dump(single, open(os.path.join(work, "single.json"), "w"))
    # pstrain-train runs in this process's cwd: sample it from a cwd of its own.
    os.makedirs(os.path.join(work, "train"), exist_ok=True)
    here = os.getcwd()
    os.chdir(os.path.join(work, "train"))
    try:
        seen, text = sample_run([os.path.join(build, "worker", "pstrain-train"), "--spec", os.path.join(work, "single.json"),
                                 "--data-dir", os.path.abspath(a.data_dir), "--threads", "1", "--parallelism", "batch"],
                                os.path.join(work, "train"))
    finally:
        os.chdir(here)
    result = json.loads(next(l for l in text.splitlines() if l.startswith("RESULT "))[7:])
    steps = result["steps"]
    batch = t["global_batch_size"]
    examples = steps * batch
    trainer_cpu = sum(c for _, c in seen.values())

    # (b) the cluster.
    cluster = json.loads(json.dumps(spec))
    cluster["training"].update(mode="sync", workers=a.workers, servers=a.servers)
    cluster.pop("backup", None)
    json.dump(cluster, open(os.path.join(work, "cluster.json"), "w"))
    env = dict(os.environ, LOCAL_CLUSTER_DIR=os.path.join(work, "cluster"), RPC_PORT=str(a.port_base),
               HTTP_PORT=str(a.port_base + 1), SERVERS=str(a.servers), WORKERS=str(a.workers), WORKER_THREADS="1",
               WORKER_FLAGS=a.worker_flags, BUILD_DIR=os.path.relpath(build, ROOT),
               PSTRAIN_DATA_DIR=os.path.abspath(a.data_dir))
    seen_c, text_c = sample_run([os.path.join(ROOT, "deploy", "local-cluster.sh"), "run", os.path.join(work, "cluster.json")],
                                os.path.join(work, "cluster"), env)
    roles = {}
    for name, cpu in seen_c.values():
        role = name.replace("pstrain-", "")
        n, c = roles.get(role, (0, 0.0))
        roles[role] = (n + 1, c + cpu)
    cluster_cpu = sum(c for _, c in roles.values())

    per_k = lambda cpu: 1e6 * cpu / examples  # ms per 1,000 examples
    print(f"job: {a.spec}, {examples:,} examples trained ({steps} steps of {batch}), machine load avg {os.getloadavg()[0]:.1f}")
    print("| run | process (all of the role) | count | CPU s | CPU ms per 1,000 examples | CPU ms per step |")
    print("|---|---|---|---|---|---|")
    print(f"| trainer, 1 thread | pstrain-train | 1 | {trainer_cpu:.2f} | {per_k(trainer_cpu):.1f} | {1e3 * trainer_cpu / steps:.2f} |")
    for role in ("worker", "server", "coordinator"):
        if role in roles:
            n, c = roles[role]
            print(f"| sync {a.workers} x {a.servers} | {role} | {n} | {c:.2f} | {per_k(c):.1f} | {1e3 * c / steps:.2f} |")
    print(f"| sync {a.workers} x {a.servers} | all | {sum(n for n, _ in roles.values())} | {cluster_cpu:.2f} | {per_k(cluster_cpu):.1f} | {1e3 * cluster_cpu / steps:.2f} |")
    ratio = cluster_cpu / trainer_cpu
    cores = os.cpu_count()
    print(f"\ncluster CPU / trainer CPU = {ratio:.2f}: on {cores} cores the cluster can reach at most "
          f"{cores / ratio:.2f}x the 1-thread trainer (and {a.workers / ratio:.2f}x with one core per worker)")


if __name__ == "__main__":
    main()
