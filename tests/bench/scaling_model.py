"""scaling_model.py — the paper model of sync training on pstrain (docs/BENCHMARKS.md, "Scaling over
the test bed"), fitted to tests/bench/scaling_bench.sh's figures, and its predictions.

Usage: /usr/bin/python3 tests/bench/scaling_model.py RESULTS.jsonl [RESULTS.jsonl ...]
           [--data-dir DIR] [--workers 64] [--rate-gbit 25] [--coordinator-ms-per-worker MS]

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
   the form of 2 with each part on its own host: t = t0 + max(c_w + u + v W/S, worker link, server
   link, c_c W): c_w the CPU-seconds of a worker's step (median of the cells with the same kernels
   pushed as factors), u + v W/S a server's (fitted: u S + v W for all servers), c_c W the
   coordinator's, links with W/S of every worker's bytes on each server's. DDP (gloo ring):
   t = t0_ddp + max(c_ddp, 2 (W-1)/W M / (eta R)) + 2 (W-1) alpha.
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


KMAX_PART = 16 << 20  # rpc::kMaxPartBytes: a factored push is cut into groups of at most this much values


def bytes_per_worker(units, b, S, nz):
    """(push, pull) payload bytes per worker and step under the default exchange."""
    push = pull = 0.0
    for l, (i, o) in enumerate(zip(units, units[1:])):
        factored = 3 * b * (i + S * o) <= i * o
        # pushFactors calls per server: its share of the kernel in groups of at most 16 MiB of
        # values; each carries the deltas again (the inputs are cut by rows).
        groups = S * math.ceil(4 * i * o / S / KMAX_PART)
        if l == 0 and factored:
            push += b * (2 * nz + groups * o)
            pull += b * S * o
        elif factored:
            push += b * (i + groups * o)
            pull += i * o
        else:
            rows = nz if l == 0 else i
            push += rows * o
            pull += rows * o
        push += o  # bias
        pull += o
    return 4 * push, 4 * pull


def pattern(units, b, S):
    """Which kernels are pushed as factors (worker/factor_plan.cc): decides where the products run."""
    return tuple(3 * b * (i + S * o) <= i * o for i, o in zip(units, units[1:]))


def fit_bed(C, N, y):
    """t0, P, eta minimising the relative error of t = t0 + max(C/P, N/eta) (grid, then a finer one)."""
    C, N, y = map(np.asarray, (C, N, y))
    best = None
    lo, hi = (0.0, 0.3, 0.2), (0.05, 3.0, 1.5)
    for _ in range(3):
        grids = [np.linspace(l, h, 31) for l, h in zip(lo, hi)]
        for t0 in grids[0]:
            for P in grids[1]:
                pred = t0 + np.maximum(C[:, None] / P, N[:, None] / grids[2][None, :])
                e = np.sqrt(np.mean((pred / y[:, None] - 1) ** 2, axis=0))
                k = int(np.argmin(e))
                if best is None or e[k] < best[0]:
                    best = (float(e[k]), t0, P, float(grids[2][k]))
        step = [(h - l) / 30 for l, h in zip(lo, hi)]
        lo = tuple(max(1e-9, v - 2 * d) for v, d in zip(best[1:], step))
        hi = tuple(v + 2 * d for v, d in zip(best[1:], step))
    return best[1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--data-dir", default=os.environ.get("PSTRAIN_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--rate-gbit", type=float, default=25)
    ap.add_argument("--coordinator-ms-per-worker", type=float, default=None,
                    help="the coordinator's CPU per worker and step in the prediction instead of the fitted one "
                         "(the cells report progress every step; the spec's default is every 10)")
    a = ap.parse_args()
    cells = [json.loads(l) for f in a.results for l in open(f) if l.strip()]
    ps = [c for c in cells if c["kind"] == "pstrain"]
    ddp = [c for c in cells if c["kind"] == "ddp"]
    b = ps[0]["batch"] if ps else 64
    nz = nonzero_rows(a.data_dir, b)
    print(f"## 1. Bytes per step: the formula against the measurements (b = {b}, nz = {nz:.0f} of 784 input rows)\n")
    print("| job | W | S | push: formula / payload / wire | pull: formula / payload / wire | busiest server out: W/S x pull formula / wire |")
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
    print(f"\nwire / formula: median {wire:.3f} (TCP/IP headers, Cap'n Proto framing, retransmissions; "
          f"min {min(wire_over):.3f}, max {max(wire_over):.3f})\n")

    # 2. The bed's step time, per job (the jobs ran at different times; the machine is shared and
    # its load changed: P is the cores the job's processes got).
    print("## 2. Step time on the bed: t = t0 + max(C/P, N/(eta R)), fitted per job (least relative error)\n")
    fits = {}
    for model in sorted({c["model"] for c in ps}):
        mine = [c for c in ps if c["model"] == model]
        for c in mine:
            c["_C"] = c["cpu_s_per_step"]["coordinator"] + sum(c["cpu_s_per_step"]["workers"]) + sum(c["cpu_s_per_step"]["servers"])
            c["_N"] = max(c["worker_out"], c["worker_in"], c["server_in_max"], c["server_out_max"])
        t0, P, eta = fit_bed([c["_C"] for c in mine], [8 * c["_N"] / RATES[c["rate"]] for c in mine],
                             [c["step_s"] for c in mine])
        fits[model] = (t0, P, eta)
        print(f"{model}: t0 = {1e3 * t0:.1f} ms, P = {P:.2f} cores, eta = {eta:.2f} (over {len(mine)} cells)\n")
        print("| job | link | W | S | step measured | CPU-s per step (C) | busiest link bytes (N) | C/P | N/(eta R) | step fitted | error |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        errs = []
        for c in sorted(mine, key=lambda c: (c["rate"], c["workers"], c["servers"])):
            n = 8 * c["_N"] / RATES[c["rate"]]
            fit = t0 + max(c["_C"] / P, n / eta)
            errs.append(abs(fit / c["step_s"] - 1))
            print(f"| {model} | {c['rate']} | {c['workers']} | {c['servers']} | {1e3 * c['step_s']:.1f} ms | "
                  f"{1e3 * c['_C']:.1f} ms | {c['_N'] / 1e6:.2f} MB | {1e3 * c['_C'] / P:.1f} ms | "
                  f"{1e3 * n / eta:.1f} ms | {1e3 * fit:.1f} ms | {100 * (fit / c['step_s'] - 1):+.0f}% |")
        print(f"\nmedian |error| {100 * statistics.median(errs):.0f}%, max {100 * max(errs):.0f}%\n")
    t0d = {}
    if ddp:
        print("DDP (gloo ring) on the bed, the same form with its job's P and eta, its own t0 (median residual):\n")
        print("| job | link | W | step measured | C | N | step fitted | error |")
        print("|---|---|---|---|---|---|---|---|")
        for model in sorted({c["model"] for c in ddp}):
            t0, P, eta = fits[model]
            mine = sorted((c for c in ddp if c["model"] == model), key=lambda c: (c["rate"], c["workers"]))
            res = [c["step_s"] - max(c["cpu_s_per_step"] / P, 8 * max(c["worker_out"], c["worker_in"]) / RATES[c["rate"]] / eta)
                   for c in mine]
            t0d[model] = max(0.0, statistics.median(res))
            for c in mine:
                N = max(c["worker_out"], c["worker_in"])
                fit = t0d[model] + max(c["cpu_s_per_step"] / P, 8 * N / RATES[c["rate"]] / eta)
                print(f"| {model} | {c['rate']} | {c['workers']} | {1e3 * c['step_s']:.1f} ms | {1e3 * c['cpu_s_per_step']:.1f} ms | "
                      f"{N / 1e6:.2f} MB | {1e3 * fit:.1f} ms | {100 * (fit / c['step_s'] - 1):+.0f}% |")
        print("\n" + ", ".join(f"{m}: t0_ddp = {1e3 * t:.1f} ms" for m, t in t0d.items()) + "\n")

    # 3. Per-process CPU: the constants of the cluster model.
    print("## 3. The cluster model's constants (CPU-seconds per step; F: kernel pushed as factors, g: as a gradient)\n")
    consts = {}
    for model in sorted({c["model"] for c in ps}):
        units = MODELS[model]
        mine = [c for c in ps if c["model"] == model]
        groups = {}
        for c in mine:
            groups.setdefault(pattern(units, b, c["servers"]), []).append(c)
        per = {}
        for k, cs in sorted(groups.items()):
            # A worker's step: the median. All servers' CPU per step = u S + v W: u a server's own work
            # per step, v the work per push (sums, the factor products, the reply).
            c_w = statistics.median(x for c in cs for x in c["cpu_s_per_step"]["workers"])
            A = np.array([[c["servers"], c["workers"]] for c in cs], float)
            u, v = np.linalg.lstsq(A, np.array([sum(c["cpu_s_per_step"]["servers"]) for c in cs]), rcond=None)[0]
            per[k] = (c_w, max(u, 0.0), max(v, 0.0))
            print(f"- {model}, kernels {''.join('F' if f else 'g' for f in k)} (S = "
                  f"{', '.join(str(x) for x in sorted({c['servers'] for c in cs}))}): a worker's step {1e3 * c_w:.1f} ms; "
                  f"a server {1e3 * max(u, 0):.1f} ms + {1e3 * max(v, 0):.2f} ms per worker it serves")
        # The coordinator: a part per second (heartbeats, this benchmark's 10 polls a second of the
        # job's status) and a part per worker and step (examples, progress reports): CPU per step =
        # a t_step + c W.
        A = np.array([[c["step_s"], c["workers"]] for c in mine], float)
        a_c, c_c = np.linalg.lstsq(A, np.array([c["cpu_s_per_step"]["coordinator"] for c in mine]), rcond=None)[0]
        c_c = max(c_c, 0.0)
        if a.coordinator_ms_per_worker is not None:
            print(f"- {model}: the coordinator fitted at {1e3 * c_c:.2f} ms per worker and step; the prediction takes "
                  f"{a.coordinator_ms_per_worker:.2f} ms (--coordinator-ms-per-worker)")
            c_c = a.coordinator_ms_per_worker / 1e3
        mine_d = [c for c in ddp if c["model"] == model]
        c_d = statistics.median(c["cpu_s_per_step"] / c["workers"] for c in mine_d) if mine_d else float("nan")
        consts[model] = (per, c_c, c_d)
        print(f"- {model}: the coordinator {100 * a_c:.1f}% of a core + {1e3 * c_c:.2f} ms per worker and step"
              + (f"; a DDP rank's step {1e3 * c_d:.1f} ms" if mine_d else "") + "\n")
    alpha = 50e-6  # one gloo ring hop's latency on a LAN; the bed has no latency to fit it from
    R = a.rate_gbit * 1e9 / 8
    W = a.workers
    print(f"## 4. Prediction: {W} workers at {a.rate_gbit:g} Gbit/s per node, a host per node\n")
    print("t = t0 + max(worker CPU + server CPU, worker link, busiest server link, coordinator CPU), each "
          "server one core (its event loop), links at the bed's eta.\n")
    print("| job | variant | S | samples/s | step | worker CPU | server CPU | worker link | busiest server link | coordinator CPU | limit | speed-up over 1 worker |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model, (per, c_c, c_d) in consts.items():
        units = MODELS[model]
        M = 4 * params(units)
        t0, P, eta = fits[model]
        plain = tuple(False for _ in units[1:])
        # The server's cost of a push of whole gradients, where no cell measured it: the mnist
        # cells' per-parameter cost (whole gradients are summed element by element).
        per_param_plain = None
        if "mnist" in consts and plain in consts["mnist"][0]:
            per_param_plain = consts["mnist"][0][plain][2] / params(MODELS["mnist"])

        def constants(k):
            if k in per:
                return per[k]
            near = max(per, key=lambda m: sum(x == y for x, y in zip(m, k)))
            c_w, u, v = per[near]
            if k == plain and per_param_plain is not None:
                v = per_param_plain * params(units)
            return c_w, u, v

        def step(Wk, S, reply_factor=1.0, per_host=1):
            k = pattern(units, b, S) if per_host == 1 else plain
            c_w, u, v = constants(k)
            if per_host == 1:
                push, pull = bytes_per_worker(units, b, S, nz)
            else:  # a host sums its workers' whole gradients and pushes once (no factors: they do not add up)
                push, pull = bytes_per_worker([units[0], *units[1:]], b * per_host, 10 ** 6, 784)
                c_w = constants(plain)[0]
            pull *= reply_factor
            pushers = Wk / per_host
            parts = {"worker CPU": c_w, "server CPU": u + v * pushers / S,
                     "worker link": wire * max(push, pull) / (eta * R),
                     "server link": wire * pushers * max(push, pull) / S / (eta * R),
                     "coordinator CPU": c_c * Wk}
            t = t0 + max(parts["worker CPU"] + parts["server CPU"], parts["worker link"], parts["server link"],
                         parts["coordinator CPU"])
            return t, parts

        one = b / step(1, 1)[0]
        scenarios = [("default", S, 1.0, 1) for S in (1, 4, 8, 16, 32, 64)]
        scenarios += [("replies in fp16 (not built)", S, 0.5, 1) for S in (4, 16)]
        scenarios += [("hierarchical: 8 workers a host, summed gradients", S, 1.0, 8) for S in (4, 8)]
        for name, S, rf, h in scenarios:
            t, parts = step(W, S, rf, h)
            terms = {"worker + server CPU": parts["worker CPU"] + parts["server CPU"], "worker link": parts["worker link"],
                     "server link": parts["server link"], "coordinator CPU": parts["coordinator CPU"]}
            worst = max(terms, key=terms.get)
            if worst == "worker + server CPU":
                worst = "server CPU" if parts["server CPU"] > parts["worker CPU"] else "worker CPU"
            print(f"| {model} | {name} | {S} | {W * b / t:,.0f} | {1e3 * t:.1f} ms | {1e3 * parts['worker CPU']:.1f} ms | "
                  f"{1e3 * parts['server CPU']:.1f} ms | {1e3 * parts['worker link']:.1f} ms | "
                  f"{1e3 * parts['server link']:.1f} ms | {1e3 * parts['coordinator CPU']:.1f} ms | {worst} | "
                  f"{W * b / t / one:.1f}x |")
        if c_d == c_d:
            link = wire * 2 * (W - 1) / W * M / (eta * R)
            t = t0d[model] + max(c_d, link) + 2 * (W - 1) * alpha
            print(f"| {model} | DDP ring allreduce | - | {W * b / t:,.0f} | {1e3 * t:.1f} ms | {1e3 * c_d:.1f} ms | - | "
                  f"{1e3 * link:.1f} ms | - | - | {'link' if link > c_d else 'worker CPU'} | "
                  f"{W * b / t / (b / (t0d[model] + c_d)):.1f}x |")
        # Where it stops: the busiest server's CPU or link reaches a worker's compute.
        print()
        for S in (1, 4, 16, 64):
            push, pull = bytes_per_worker(units, b, S, nz)
            c_w, u, v = constants(pattern(units, b, S))
            w_link = S * c_w * eta * R / (wire * max(push, pull))
            w_cpu = S * max(c_w - u, 0) / v if v else float("inf")
            print(f"- {model}, S = {S}: a server's CPU per step passes a worker's from W = {w_cpu:.0f}, its link from "
                  f"W = {w_link:.0f} (it sends W/S x {max(push, pull) / 1e6:.2f} MB a step)")
        print(f"- {model}: the coordinator's CPU passes a worker's from W = {constants(pattern(units, b, 64))[0] / c_c:.0f}\n")

if __name__ == "__main__":
    main()
