"""scaling_bench.py — the Python parts of tests/bench/scaling_bench.sh (used by it only).

Subcommands:
  data --out DIR --shared SHARED_DATA --train N --test M
      DIR/mnist-n<N>/ (dataset directory): N training examples of mnist10k (taken cyclically:
      more than its 5,002 repeat) and its first M test examples. Prints the dataset's name.
  spec --model mnist|large --workers W --servers S --batch-per-worker B --dataset NAME [--epochs E] [--metrics-every N]
      the job spec (JSON on stdout): mnist = deploy/jobs/mnist-mlp.json (784-700-500-10, 905,010
      parameters), large = the suite's large MLP 784-4096-5000-10 (23,750,370 parameters), Adam,
      sync, --epochs epochs (default 1), global batch W x B, no backups, metrics every step
      (or every --metrics-every steps).
  poll --http HOST:PORT --links L1,L2,... --pids name=pid,... --out FILE
      run inside the coordinator's namespace: every 0.1 s, GET /v1/jobs/cli-job (step, state)
      and, at the same instant, the byte counters of the bed's root-side veths (/proc/1/net/dev:
      pid 1's network namespace, where the bridge is; a root-side veth's rx is its node's egress)
      and each named process's CPU time (/proc/PID/stat); one JSON line per sample, until the job
      ends. Then the job's final status as the last line.
  row --samples FILE --model M --rate R --workers W --servers S --batch-per-worker B [--json FILE]
      one Markdown row (and with --json, the figures as a JSON line appended to FILE, for
      scaling_model.py) from the samples: the window runs from the sample where the step counter
      turns to the first step past 20% of the run to the one where it turns to the last step
      before 95% (the first steps, the initial pull and the final collection left out).
  ddp-rank --spec FILE --data-dir DIR --rank R --world W --master ADDR --port P --steps N
           --warmup K --links L1,... --pids-file F --out FILE
      one DDP (gloo) rank of the same job, in its own namespace (GLOO_SOCKET_IFNAME=eth0): per-rank
      batch = the spec's global batch / W, N timed steps after K untimed ones; rank 0 reads the
      veth counters and CPU times at the barriers around the timed steps and writes a JSON result.
  ddp-row --result FILE --model M --rate R --workers W --batch-per-worker B [--json FILE]
      the DDP row (and JSON line).
"""
import json, os, sys, time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PARAMS = {"mnist": 905_010, "large": 23_750_370}


def args_of(argv):
    out, i = {}, 0
    while i < len(argv):
        out[argv[i].lstrip("-").replace("-", "_")] = argv[i + 1]
        i += 2
    return out


def cmd_data(a):
    sys.path.insert(0, HERE)
    import pt_job
    n, m = int(a["train"]), int(a["test"])
    name = f"mnist-n{n}"
    d = os.path.join(a["out"], name)
    if not os.path.exists(os.path.join(d, "dataset.json")):
        os.makedirs(d, exist_ok=True)
        manifest = {"num_classes": 10}
        for split, count in (("train", n), ("test", m)):
            x, y = pt_job.load_builtin(a["shared"], "mnist10k", split)
            idx = np.arange(count) % len(x)
            np.save(os.path.join(d, f"{split}-x.npy"), np.ascontiguousarray(x[idx]))
            np.save(os.path.join(d, f"{split}-y.npy"), y[idx].astype(np.int64))
            manifest[split] = {"x": f"{split}-x.npy", "y": f"{split}-y.npy"}
        json.dump(manifest, open(os.path.join(d, "dataset.json"), "w"), indent=1)
    print(name)


def spec_of(model, workers, servers, batch, dataset, epochs=1, metrics_every=1):
    spec = json.load(open(os.path.join(ROOT, "deploy", "jobs", "mnist-mlp.json")))
    if model == "large":
        spec["name"] = "large-mlp"
        spec["model"]["layers"] = [{"type": "flatten"}, {"type": "dense", "units": 4096, "activation": "relu"},
                                   {"type": "dense", "units": 5000, "activation": "relu"}, {"type": "dense", "units": 10}]
    elif model != "mnist":
        sys.exit(f"scaling_bench: model is mnist or large, not {model!r}")
    spec["dataset"]["name"] = dataset
    spec["training"].update({"mode": "sync", "workers": workers, "servers": servers, "epochs": epochs,
                             "global_batch_size": workers * batch, "metrics_every_steps": metrics_every})
    spec.pop("backup", None)
    return spec


def cmd_spec(a):
    print(json.dumps(spec_of(a["model"], int(a["workers"]), int(a["servers"]), int(a["batch_per_worker"]), a["dataset"],
                             int(a.get("epochs", 1)), int(a.get("metrics_every", 1)))))


def read_links(links):
    """{link: (rx, tx)} of the root namespace's devices (pid 1's /proc/net/dev)."""
    out = {}
    for line in open("/proc/1/net/dev").read().splitlines()[2:]:
        name, rest = line.split(":", 1)
        name = name.strip()
        if name in links:
            f = rest.split()
            out[name] = (int(f[0]), int(f[8]))
    return out


def read_cpu(pids):
    """{name: seconds of CPU (user + system)}."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        try:
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            out[name] = (int(f[11]) + int(f[12])) / tick
        except OSError:
            out[name] = None
    return out


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def cmd_poll(a):
    links = a["links"].split(",")
    pids = dict(p.split("=") for p in a["pids"].split(","))
    url = f"http://{a['http']}/v1/jobs/cli-job"
    deadline = time.time() + float(a.get("timeout", 1800))
    last = None
    with open(a["out"], "w") as out:
        while time.time() < deadline:
            try:
                j = get(url)
            except Exception:  # not submitted yet, or the coordinator is gone (--exit-when-done)
                j = None
                if last is not None:
                    out.write(json.dumps({"final": last}) + "\n")
                    return
            t = time.time()
            if j is not None:
                last = j
                out.write(json.dumps({"t": t, "step": j.get("step", 0), "state": j["state"],
                                      "links": read_links(links), "cpu": read_cpu(pids), "wire": j.get("wire")}) + "\n")
                out.flush()
                if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    out.write(json.dumps({"final": j}) + "\n")
                    return
            time.sleep(0.1)


def fmt_bytes(b):
    return f"{b / 1e6:.2f} MB" if b >= 1e5 else f"{b / 1e3:.1f} kB"


def cmd_row(a):
    lines = [json.loads(l) for l in open(a["samples"])]
    final = next((l["final"] for l in lines if "final" in l), None)
    samples = [l for l in lines if "t" in l and l["state"] == "RUNNING"]
    model, rate = a["model"], a["rate"]
    W, S, B = int(a["workers"]), int(a["servers"]), int(a["batch_per_worker"])
    total = final["total_steps"] if final else max(s["step"] for s in samples)
    lo = [s for s in samples if s["step"] >= max(1, 0.2 * total)]
    hi = [s for s in samples if s["step"] <= 0.95 * total]
    state = final["state"] if final else "?"
    if not lo or not hi or hi[-1]["t"] <= lo[0]["t"] or hi[-1]["step"] <= lo[0]["step"]:
        print(f"| {model} | {rate} | {W} | {S} | ? ({state}, too few samples) | | | | | | |")
        return
    # Both ends where the step counter turns (the first sample showing the step): the last
    # sample still showing a step would count most of the next step's traffic and time.
    s0 = lo[0]
    s1 = next(s for s in samples if s["step"] == hi[-1]["step"])
    steps, dt = s1["step"] - s0["step"], s1["t"] - s0["t"]
    sps = steps * W * B / dt

    def per_step(link, k):  # k 0: rx of the root side = the node's egress; 1: its ingress
        return (s1["links"][link][k] - s0["links"][link][k]) / steps

    links = list(s1["links"])
    workers = [l for l in links if l.rsplit("-", 1)[1].startswith("w")]
    servers = [l for l in links if l.rsplit("-", 1)[1].startswith("s")]
    coord = [l for l in links if l.endswith("-c")]
    w_out = sum(per_step(l, 0) for l in workers) / len(workers)
    w_in = sum(per_step(l, 1) for l in workers) / len(workers)
    srv = {l.rsplit("-", 1)[1]: (per_step(l, 1), per_step(l, 0)) for l in servers}
    cpu = {}
    for name in s1["cpu"]:
        c0, c1 = s0["cpu"].get(name), s1["cpu"].get(name)
        cpu[name] = (c1 - c0) / dt if c0 is not None and c1 is not None else float("nan")
    top_bytes = max(srv, key=lambda s: srv[s][0] + srv[s][1])
    top_cpu = max((n for n in cpu if n.startswith("s")), key=lambda n: cpu[n])
    s_in = sum(v[0] for v in srv.values()) / len(srv)
    s_out = sum(v[1] for v in srv.values()) / len(srv)
    # Link use: the busiest direction of the busiest node against the cap, per second of the window.
    cap = {"1gbit": 1e9, "10gbit": 1e10, "25gbit": 25e9, "100mbit": 1e8}.get(rate)
    busiest = max(max(per_step(l, 0), per_step(l, 1)) for l in links) * steps / dt * 8
    util = f"{100 * busiest / cap:.0f}%" if cap else "-"
    total_cpu = sum(v for v in cpu.values() if v == v)
    payload = ""
    wire = s1.get("wire") or {}  # the workers' reports at the window's end (the last step's reply is whole)
    if wire.get("bytes_pushed_per_step"):
        p = wire["bytes_pushed_per_step"][0]
        q = wire["bytes_pulled_per_step"][0]
        payload = f"{fmt_bytes(p)} / {fmt_bytes(q)}"
    c_bytes = per_step(coord[0], 0) + per_step(coord[0], 1) if coord else 0
    print(f"| {model} | {rate} | {W} | {S} | {sps:,.0f} | {fmt_bytes(w_out)} / {fmt_bytes(w_in)} | {payload} | "
          f"{fmt_bytes(s_in)} / {fmt_bytes(s_out)} | {top_bytes} ({fmt_bytes(srv[top_bytes][0] + srv[top_bytes][1])}); "
          f"CPU {top_cpu} {100 * cpu[top_cpu]:.0f}% | {util} | {100 * total_cpu:.0f}% | {fmt_bytes(c_bytes)} | "
          f"{steps} steps / {dt:.1f} s |")
    sys.stdout.flush()
    if a.get("json"):
        per = lambda prefix: [v * dt / steps for n, v in cpu.items() if n.startswith(prefix) and v == v]
        record = {"kind": "pstrain", "model": model, "rate": rate, "workers": W, "servers": S, "batch": B,
                  "samples_per_s": sps, "step_s": dt / steps, "worker_out": w_out, "worker_in": w_in,
                  "server_in_mean": s_in, "server_out_mean": s_out,
                  "server_in_max": max(v[0] for v in srv.values()), "server_out_max": max(v[1] for v in srv.values()),
                  "coordinator_bytes": c_bytes, "payload_pushed": wire.get("bytes_pushed_per_step", [None])[0],
                  "payload_pulled": wire.get("bytes_pulled_per_step", [None])[0],
                  "cpu_s_per_step": {"coordinator": sum(per("c")), "workers": per("w"), "servers": per("s")},
                  "busiest_link_bits_per_s": busiest}
        with open(a["json"], "a") as f:
            f.write(json.dumps(record) + "\n")


def cmd_ddp_rank(a):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    sys.path.insert(0, HERE)
    import pt_job
    torch.set_num_threads(1)
    rank, world = int(a["rank"]), int(a["world"])
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = a["master"], a["port"]
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    spec = json.load(open(a["spec"]))
    torch.manual_seed(int(spec["model"].get("seed", 0)))
    model = DDP(pt_job.build_model(spec))
    opt = pt_job.make_optimizer(spec, model.parameters())
    x, y = pt_job.load_builtin(a["data_dir"], "mnist10k", "train")
    x = torch.from_numpy(x.astype(np.float32) / 255.0)
    y = torch.from_numpy(y)
    b = int(spec["training"]["global_batch_size"]) // world
    steps, warmup = int(a["steps"]), int(a["warmup"])
    links = a["links"].split(",")
    rng = np.random.default_rng(22 + rank)
    marks = {}
    for i in range(warmup + steps):
        if i == warmup:
            dist.barrier()
            if rank == 0:
                pids = dict(p.split("=") for p in open(a["pids_file"]).read().split())
                marks["t0"], marks["links0"], marks["cpu0"] = time.time(), read_links(links), read_cpu(pids)
        g = torch.from_numpy(rng.integers(0, len(x), b))
        loss = F.cross_entropy(model(x[g]), y[g])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        marks["t1"], marks["links1"], marks["cpu1"] = time.time(), read_links(links), read_cpu(pids)
        marks.update({"steps": steps, "world": world, "batch": b})
        json.dump(marks, open(a["out"], "w"))
    dist.destroy_process_group()


def cmd_ddp_row(a):
    r = json.load(open(a["result"]))
    W, B, steps = int(a["workers"]), int(a["batch_per_worker"]), r["steps"]
    dt = r["t1"] - r["t0"]
    sps = steps * W * B / dt
    outs = [(r["links1"][l][0] - r["links0"][l][0]) / steps for l in r["links1"]]
    ins = [(r["links1"][l][1] - r["links0"][l][1]) / steps for l in r["links1"]]
    cpu = sum((r["cpu1"][n] - r["cpu0"][n]) for n in r["cpu1"] if r["cpu1"][n] is not None and r["cpu0"].get(n) is not None) / dt
    rate = a["rate"]
    cap = {"1gbit": 1e9, "10gbit": 1e10, "25gbit": 25e9, "100mbit": 1e8}.get(rate)
    busiest = max(max(outs), max(ins)) * steps / dt * 8
    util = f"{100 * busiest / cap:.0f}%" if cap else "-"
    print(f"| {a['model']} | {rate} | {W} | DDP | {sps:,.0f} | {fmt_bytes(sum(outs) / W)} / {fmt_bytes(sum(ins) / W)} | | | | "
          f"{util} | {100 * cpu:.0f}% | | {steps} steps / {dt:.1f} s |")
    sys.stdout.flush()
    if a.get("json"):
        record = {"kind": "ddp", "model": a["model"], "rate": rate, "workers": W, "batch": B, "samples_per_s": sps,
                  "step_s": dt / steps, "worker_out": sum(outs) / W, "worker_in": sum(ins) / W,
                  "cpu_s_per_step": cpu * dt / steps, "busiest_link_bits_per_s": busiest}
        with open(a["json"], "a") as f:
            f.write(json.dumps(record) + "\n")


def main():
    cmd, a = sys.argv[1], args_of(sys.argv[2:])
    {"data": cmd_data, "spec": cmd_spec, "poll": cmd_poll, "row": cmd_row, "ddp-rank": cmd_ddp_rank,
     "ddp-row": cmd_ddp_row}[cmd](a)


if __name__ == "__main__":
    main()
