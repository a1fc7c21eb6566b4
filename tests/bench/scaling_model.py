"""scaling_model.py — the paper model of sync training on pstrain (docs/BENCHMARKS.md, "Scaling over
the test bed"), fitted to tests/bench/scaling_bench.sh's figures, and its predictions.

Usage: /usr/bin/python3 tests/bench/scaling_model.py RESULTS.jsonl [RESULTS.jsonl ...]
           [--data-dir DIR] [--workers 64] [--rate-gbit 25]

1. Bytes per step (exact, from the architecture; checked against every measured cell). Per worker
   with b examples a step and S servers, for each dense kernel in x out (docs/DESIGN-NOTES.md):
   - factored when b (in + S out) <= in out / 3 (worker/factor_plan.cc);
   - the first kernel, factored: push b (2 nz + S out) floats (the batch's nonzero input rows, the
     next batch's for the forward on the servers, and the deltas to every server), pull b S out
     (each server's partial product for the next batch);
   - another kernel, factored: push b (in + S out), pull in x out (the values; row-sparse, but
     hidden activations leave no row zero over a batch);
   - not factored: push and pull the touched rows (first kernel: nz of in; others: all);
   - biases and small kernels: whole both ways.
   nz = the rows of the input nonzero in at least one example of the batch (measured on mnist10k).
   Each server receives and sends W/S of the workers' bytes (striped chunks; measured imbalance
   within a few %). The coordinator sends each worker its examples (b x 784 B) per step.
2. Step time on the bed (fit): t = t0 + C / P + N / (eta R): C the CPU-seconds per step of all the
   job's processes (measured), P the cores they got (fitted: the machine is shared), N the bytes
   per step on the busiest link direction (measured), R the cap, eta the share of the cap TCP
   through tbf reaches (fitted), t0 the per-step latency of a sync step (fitted).
3. On a real cluster (a host per node, links of R both ways, the bed's constants): t = t0 + c_w +
   c_s W / S + max(bytes per worker, W/S x bytes per worker) / (eta R), c_w the CPU-seconds of a
   worker's step and c_s a server's per worker served (medians over the cells). DDP (gloo ring):
   t = t0_ddp + c_ddp + 2 (W-1)/W M / (eta R) + 2 (W-1) alpha.
"""
import argparse, json, math, os, statistics, sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = {"mnist": [784, 700, 500, 10], "large": [784, 4096, 5000, 10]}
RATES = {"100mbit": 1e8, "1gbit": 1e9, "10gbit": 1e10, "25gbit": 25e9}


def params(units):
    return sum(i * o + o for i, o in zip(units, units[1:]))


def nonzero_rows(data_dir, b, trials=200):
    """Mean number of input features nonzero in at least one of b random mnist10k examples."""
    sys.path.insert(0, HERE)
    import pt_job
    x, _ = pt_job.load_builtin(data_dir, "mnist10k", "train")
    x = x.reshape(len(x), -1) != 0
    rng = np.random.default_rng(1)
    return float(np.mean([x[rng.integers(0, len(x), b)].any(0).sum() for _ in range(trials)]))


def bytes_per_worker(units, b, S, nz):
    """(push, pull) payload bytes per worker and step under the default exchange."""
    push = pull = 0.0
    for l, (i, o) in enumerate(zip(units, units[1:])):
        factored = 3 * b * (i + S * o) <= i * o
        if l == 0 and factored:
            push += b * (2 * nz + S * o)
            pull += b * S * o
        elif factored:
            push += b * (i + S * o)
            pull += i * o
        else:
            rows = nz if l == 0 else i
            push += rows * o
            pull += rows * o
        push += o  # bias
        pull += o
    return 4 * push, 4 * pull


def lsq(rows, ys):
    """Non-negative least squares by brute force over active sets (3 unknowns)."""
    A, y = np.array(rows, float), np.array(ys, float)
    best = None
    n = A.shape[1]
    for mask in range(1, 2 ** n):
        cols = [k for k in range(n) if mask >> k & 1]
        x, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
        if (x < 0).any():
            continue
        full = np.zeros(n)
        full[cols] = x
        err = float(np.sum((A @ full - y) ** 2))
        if best is None or err < best[0]:
            best = (err, full)
    return best[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--data-dir", default=os.environ.get("PSTRAIN_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--rate-gbit", type=float, default=25)
    a = ap.parse_args()
    cells = [json.loads(l) for f in a.results for l in open(f) if l.strip()]
    ps = [c for c in cells if c["kind"] == "pstrain"]
    ddp = [c for c in cells if c["kind"] == "ddp"]
    b = ps[0]["batch"] if ps else 64
    nz = nonzero_rows(a.data_dir, b)
    print(f"## 1. Bytes per step: the formula against the measurements (b = {b}, nz = {nz:.0f} of 784 input rows)\n")
    print("| job | W | S | push formula / payload / wire | pull formula / payload / wire | server out: W/S x pull formula / wire (max) |")
    print("|---|---|---|---|---|---|")
    wire_over = []
    for c in sorted(ps, key=lambda c: (c["model"], c["rate"], c["workers"], c["servers"])):
        push, pull = bytes_per_worker(MODELS[c["model"]], c["batch"], c["servers"], nz)
        wire_over += [c["worker_out"] / push, c["worker_in"] / pull]
        pp, pl = c.get("payload_pushed") or float("nan"), c.get("payload_pulled") or float("nan")
        print(f"| {c['model']} {c['rate']} | {c['workers']} | {c['servers']} | {push / 1e6:.2f} / {pp / 1e6:.2f} / "
              f"{c['worker_out'] / 1e6:.2f} MB | {pull / 1e6:.2f} / {pl / 1e6:.2f} / {c['worker_in'] / 1e6:.2f} MB | "
              f"{c['workers'] * pull / c['servers'] / 1e6:.2f} / {c['server_out_max'] / 1e6:.2f} MB |")
    wire = statistics.median(wire_over)
    print(f"\nwire / formula: median {wire:.3f} (TCP/IP headers, Cap'n Proto framing, the coordinator's "
          f"heartbeats; min {min(wire_over):.3f}, max {max(wire_over):.3f})\n")

    # 2. The bed's step time.
    print("## 2. Step time on the bed: t = t0 + C/P + N/(eta R), fitted\n")
    feats, ys = [], []
    for c in ps:
        C = c["cpu_s_per_step"]["coordinator"] + sum(c["cpu_s_per_step"]["workers"]) + sum(c["cpu_s_per_step"]["servers"])
        N = max(c["worker_out"], c["worker_in"], c["server_in_max"], c["server_out_max"])
        c["_C"], c["_N"] = C, N
        feats.append([1.0, C, 8 * N / RATES[c["rate"]]])
        ys.append(c["step_s"])
    t0, inv_p, inv_eta = lsq(feats, ys)
    P = 1 / inv_p if inv_p else float("inf")
    eta = 1 / inv_eta if inv_eta else float("inf")
    print(f"t0 = {1e3 * t0:.1f} ms, P = {P:.2f} cores, eta = {eta:.2f} (over {len(ps)} cells)\n")
    print("| job | link | W | S | step measured | CPU-s per step (C) | busiest link bytes (N) | C/P | N/(eta R) | step fitted | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    errs = []
    for c, f in zip(ps, feats):
        fit = t0 + f[1] * inv_p + f[2] * inv_eta
        errs.append(abs(fit / c["step_s"] - 1))
        print(f"| {c['model']} | {c['rate']} | {c['workers']} | {c['servers']} | {1e3 * c['step_s']:.1f} ms | "
              f"{1e3 * c['_C']:.1f} ms | {c['_N'] / 1e6:.2f} MB | {1e3 * f[1] * inv_p:.1f} ms | "
              f"{1e3 * f[2] * inv_eta:.1f} ms | {1e3 * fit:.1f} ms | {100 * (fit / c['step_s'] - 1):+.0f}% |")
    print(f"\nmedian |error| {100 * statistics.median(errs):.0f}%, max {100 * max(errs):.0f}%\n")

    # 2b. DDP on the bed: the same P and eta, its own t0.
    if ddp:
        print("DDP (gloo ring) on the bed: t = t0_ddp + C/P + N/(eta R) with the P and eta above, t0_ddp fitted\n")
        res = [c["step_s"] - c["cpu_s_per_step"] * inv_p - 8 * max(c["worker_out"], c["worker_in"]) / RATES[c["rate"]] * inv_eta
               for c in ddp]
        t0d = max(0.0, statistics.median(res))
        print(f"t0_ddp = {1e3 * t0d:.1f} ms\n")
        print("| job | link | W | step measured | C | N | step fitted | error |")
        print("|---|---|---|---|---|---|---|---|")
        for c in sorted(ddp, key=lambda c: (c["model"], c["rate"], c["workers"])):
            N = max(c["worker_out"], c["worker_in"])
            fit = t0d + c["cpu_s_per_step"] * inv_p + 8 * N / RATES[c["rate"]] * inv_eta
            print(f"| {c['model']} | {c['rate']} | {c['workers']} | {1e3 * c['step_s']:.1f} ms | {1e3 * c['cpu_s_per_step']:.1f} ms | "
                  f"{N / 1e6:.2f} MB | {1e3 * fit:.1f} ms | {100 * (fit / c['step_s'] - 1):+.0f}% |")
        print()

    # 3. Per-process CPU (the constants of the cluster model).
    print("## 3. The cluster model's constants (CPU-seconds per step, medians over the cells)\n")
    consts = {}
    for model in sorted({c["model"] for c in ps}):
        mine = [c for c in ps if c["model"] == model]
        c_w = statistics.median(x for c in mine for x in c["cpu_s_per_step"]["workers"])
        c_s = statistics.median(sum(c["cpu_s_per_step"]["servers"]) / c["workers"] for c in mine)
        c_c = statistics.median(c["cpu_s_per_step"]["coordinator"] / c["workers"] for c in mine)
        mine_d = [c for c in ddp if c["model"] == model]
        c_d = statistics.median(c["cpu_s_per_step"] / c["workers"] for c in mine_d) if mine_d else float("nan")
        consts[model] = (c_w, c_s, c_c, c_d)
        print(f"- {model} ({params(MODELS[model]):,} parameters, b = {b}): worker c_w = {1e3 * c_w:.1f} ms, server "
              f"c_s = {1e3 * c_s:.2f} ms per worker served, coordinator {1e3 * c_c:.2f} ms per worker"
              + (f", DDP rank {1e3 * c_d:.1f} ms" if mine_d else ""))
    alpha = 50e-6  # one gloo ring hop's latency on a LAN; the bed has no latency to fit it from
    R = a.rate_gbit * 1e9 / 8
    W = a.workers
    print(f"\n## 4. Prediction: {W} workers at {a.rate_gbit:g} Gbit/s per node (samples/s; step time; what limits)\n")
    print("| job | exchange | S | samples/s | step | worker link | busiest server link | server CPU | worker CPU | limit | speed-up over 1 worker |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, (c_w, c_s, c_c, c_d) in consts.items():
        units = MODELS[model]
        M = 4 * params(units)

        def step(Wk, S, push_pull=None, per_host=1):
            push, pull = push_pull or bytes_per_worker(units, b, S, nz)
            t_w = wire * max(push, pull) / (eta * R)
            t_s = wire * (Wk / per_host) * max(push, pull) / S / (eta * R)
            t_sc = c_s * (Wk / per_host) / S
            t = t0 + c_w + t_sc + max(t_w, t_s)
            parts = {"worker link": t_w, "server link": t_s, "server CPU": t_sc, "worker CPU": c_w}
            return t, parts

        one = b / step(1, 1)[0]
        scenarios = [("default", S, None, 1) for S in (1, 4, 8, 16, 32, 64)]
        for S in (4, 16):
            push, pull = bytes_per_worker(units, b, S, nz)
            scenarios.append(("replies in fp16 (not built)", S, (push, pull / 2), 1))
        scenarios += [("hierarchical: 8 workers per host summed first", 4, None, 8),
                      ("hierarchical: 8 workers per host summed first", 8, None, 8)]
        for name, S, pp, h in scenarios:
            t, parts = step(W, S, pp, h)
            limit = max(parts, key=parts.get)
            print(f"| {model} | {name} | {S} | {W * b / t:,.0f} | {1e3 * t:.1f} ms | {1e3 * parts['worker link']:.1f} ms | "
                  f"{1e3 * parts['server link']:.1f} ms | {1e3 * parts['server CPU']:.1f} ms | {1e3 * c_w:.1f} ms | {limit} | "
                  f"{W * b / t / one:.1f}x |")
        if c_d == c_d:
            t = t0 + c_d + wire * 2 * (W - 1) / W * M / (eta * R) + 2 * (W - 1) * alpha
            print(f"| {model} | DDP ring allreduce | - | {W * b / t:,.0f} | {1e3 * t:.1f} ms | "
                  f"{1e3 * wire * 2 * (W - 1) / W * M / (eta * R):.1f} ms | - | - | {1e3 * c_d:.1f} ms | | "
                  f"{W * b / t / (b / (t0 + c_d)):.1f}x |")
        # Where it stops: the server link's term reaches the compute (worker CPU) term.
        for S in (1, 4, 16):
            push, pull = bytes_per_worker(units, b, S, nz)
            w_star = S * (c_w + t0) * eta * R / (wire * max(push, pull))
            print(f"\n{model}, S = {S}: the servers' links take as long as a worker's compute from W = {w_star:.0f} "
                  f"workers on (W/S x {max(push, pull) / 1e6:.2f} MB a step per server)", end="")
        print("\n")


if __name__ == "__main__":
    main()
