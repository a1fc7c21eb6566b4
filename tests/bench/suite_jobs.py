"""suite_jobs.py — the jobs of tests/bench/suite.sh and its Python parts: the job specs, the data
directory (the shared data's files plus generated dataset directories), the log parser and the
Markdown table. Used by suite.sh only; the subcommands:

  prepare --work DIR --data SHARED_DATA [--jobs REGEX] [--epochs E] [--limit N]
      writes DIR/data/ (symlinks to SHARED_DATA's files; the synthetic tabular dataset tabular64/;
      with --limit, subsets <name>-first<N>/ of each dataset the jobs use: the first N train and
      N/2 test examples), DIR/specs/<job>.json (the job with the suite's epochs, sync and async
      2 x 2 variants), and prints one line per selected job: id<TAB>label<TAB>epochs
  parse LOG
      -> "samples_per_s accuracy timed_epochs": the median of the per-epoch samples/s lines without
      epoch 1 (with one epoch: that epoch), and the final test accuracy
  table RESULTS_TSV REPEATS
      the Markdown table (medians over repeats) and ratios

The tabular dataset (tabular64): 60,000 train + 10,000 test examples of 64 float32 features drawn
from N(0, 1) with numpy's default_rng(20), labels 0-9 from a fixed random teacher network
(64-32 tanh-10, argmax of its logits plus Gumbel noise of scale 0.5, same generator): learnable,
not separable. Written as a dataset directory (dataset.json and .npy pairs, common/data/dataset_manifest.h),
the same bytes on every run.
"""
import json, os, re, statistics, sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBS_DIR = os.path.join(ROOT, "deploy", "jobs")

MLP_784 = [{"type": "flatten"}, {"type": "dense", "units": 700, "activation": "relu"},
           {"type": "dense", "units": 500, "activation": "relu"}, {"type": "dense", "units": 10}]


def from_file(file, **changes):
    spec = json.load(open(os.path.join(JOBS_DIR, file)))
    for k, v in changes.items():
        spec[k] = v
    return spec


def jobs():
    """id -> (label, spec, full-run epochs). Every job keeps its own batch and optimizer."""
    mnist = from_file("mnist-mlp.json")
    fashion_mlp = from_file("mnist-mlp.json", name="fashion-mlp", dataset={"name": "fashion", "shuffle_seed": 22})
    tabular = {
        "name": "tabular-mlp",
        "dataset": {"name": "tabular64", "shuffle_seed": 20},
        "model": {"input_shape": [64], "seed": 20, "layers": [
            {"type": "dense", "units": 256, "activation": "relu"},
            {"type": "dense", "units": 256, "activation": "relu"},
            {"type": "dense", "units": 10}]},
        "loss": "sparse_softmax_cross_entropy",
        "optimizer": {"type": "adam", "learning_rate": 0.001, "epsilon": 1e-07},
        "training": {"mode": "sync", "global_batch_size": 128, "epochs": 5, "workers": 2, "servers": 2},
    }
    large = from_file("mnist-mlp.json", name="large-mlp")
    large["model"] = dict(large["model"], layers=[
        {"type": "flatten"}, {"type": "dense", "units": 4096, "activation": "relu"},
        {"type": "dense", "units": 5000, "activation": "relu"}, {"type": "dense", "units": 10}])
    # Sequence models on seq-ids200 (below): docs/BENCHMARKS.md "Text corpora" has them on real text.
    def text(name, layers, lr):
        return {"name": name, "dataset": {"name": "seq-ids200", "shuffle_seed": 23},
                "model": {"input_shape": [200], "seed": 23, "layers": layers},
                "optimizer": {"type": "adam", "learning_rate": lr},
                "training": {"mode": "sync", "global_batch_size": 32, "epochs": 2, "workers": 2, "servers": 2}}
    lstm = text("text-lstm", [{"type": "embedding", "input_dim": 20000, "output_dim": 32, "mask_zero": True},
                              {"type": "lstm", "units": 32, "bidirectional": True}, {"type": "dense", "units": 2}], 0.002)
    transformer = text("text-transformer", [
        {"name": "tokens", "type": "embedding", "input_dim": 20000, "output_dim": 32, "mask_zero": True},
        {"name": "x", "type": "position_embedding"},
        {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 16},
        {"name": "sum1", "type": "add", "inputs": ["x", "attend"]},
        {"name": "norm1", "type": "layer_norm"},
        {"name": "ff1", "type": "conv1d", "filters": 64, "kernel_size": 1, "activation": "relu"},
        {"name": "ff2", "type": "conv1d", "filters": 32, "kernel_size": 1},
        {"name": "sum2", "type": "add", "inputs": ["norm1", "ff2"]},
        {"type": "layer_norm"}, {"type": "global_avgpool1d"}, {"type": "dense", "units": 2}], 0.001)
    # The same block as a decoder's: each step attends to itself and the steps before it.
    causal = json.loads(json.dumps(transformer))
    causal["name"] = "text-causal"
    causal["model"]["layers"][2]["use_causal_mask"] = True
    return {
        "text-lstm": ("Text BiLSTM emb32 (mask_zero)-bilstm32-d2, 200 steps, Adam, b32, seq-ids200", lstm, 2),
        "text-transformer": ("Text transformer block emb32+pos, 2-head attention (masked), ff 64, avg, Adam, b32, "
                             "seq-ids200", transformer, 2),
        "mnist-mlp": ("MNIST MLP 784-700-500-10, Adam, b128, mnist10k", mnist, 5),
        "fashion-mlp": ("Fashion MLP 784-700-500-10, Adam, b128", fashion_mlp, 3),
        "fashion-cnn": ("Fashion CNN conv32-pool-conv64-pool-d64-d10, Adam, b64", from_file("fashion-cnn.json"), 3),
        "keras-cnn": ("Keras multi-worker CNN conv32-d128-d10, SGD, b128, fashion-mnist",
                      from_file("keras-multiworker-cnn.json"), 3),
        "tabular-mlp": ("Tabular MLP 64-256-256-10 (synthetic float32), Adam, b128", tabular, 5),
        "large-mlp": ("Large MLP 784-4096-5000-10 (23.8M params), Adam, b128, mnist10k", large, 3),
        "fashion-resnet": ("Residual CNN (flip, crop, 2 blocks with batch_norm, GAP, dropout), AdamW cosine, b128, "
                           "fashion-mnist", from_file("fashion-mnist-resnet.json"), 3),
        # (Not in suite.sh's default run: --jobs text-causal, --jobs tpu-cnn, the mixed-precision
        # bench's third CNN.)
        "text-causal": ("Text transformer block as text-transformer, causal attention (use_causal_mask), Adam, b32, "
                        "seq-ids200", causal, 2),
        "tpu-cnn": ("TPU guide CNN conv256-conv256-d256-d128-d10, Adam, b200, fashion-mnist", from_file("tpu-cnn.json"), 1),
    }


def write_tabular(out):
    d = os.path.join(out, "tabular64")
    if os.path.exists(os.path.join(d, "dataset.json")):
        return
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(20)
    w1 = rng.normal(0, 1 / 8, (64, 32)).astype(np.float32)
    w2 = rng.normal(0, 1, (32, 10)).astype(np.float32)
    for split, n in (("train", 60000), ("test", 10000)):
        x = rng.standard_normal((n, 64), dtype=np.float32)
        logits = np.tanh(x @ w1) @ w2 + 0.5 * rng.gumbel(size=(n, 10))
        np.save(os.path.join(d, f"{split}-x.npy"), x)
        np.save(os.path.join(d, f"{split}-y.npy"), logits.argmax(1).astype(np.int64))
    json.dump({"train": {"x": "train-x.npy", "y": "train-y.npy"}, "test": {"x": "test-x.npy", "y": "test-y.npy"},
               "num_classes": 10}, open(os.path.join(d, "dataset.json"), "w"), indent=1)


def write_sequences(out):
    """seq-ids200: documents as a tokenizer's int output (ids 1..19,999, Zipf-like, trailing 0
    padding; lengths 20-200), 8,000 train and 2,000 test, labelled by whether words 2-51 outnumber
    words 52-101: numpy's default_rng(23), the same bytes on every run."""
    d = os.path.join(out, "seq-ids200")
    if os.path.exists(os.path.join(d, "dataset.json")):
        return
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(23)
    for split, n in (("train", 8000), ("test", 2000)):
        ids = np.minimum(rng.zipf(1.3, (n, 200)), 19999).astype(np.float32)
        lengths = rng.integers(20, 201, n)
        ids[np.arange(200)[None, :] >= lengths[:, None]] = 0
        good = ((ids >= 2) & (ids < 52)).sum(1)
        bad = ((ids >= 52) & (ids < 102)).sum(1)
        np.save(os.path.join(d, f"{split}-x.npy"), ids)
        np.save(os.path.join(d, f"{split}-y.npy"), (good > bad).astype(np.int64))
    json.dump({"train": {"x": "train-x.npy", "y": "train-y.npy"}, "test": {"x": "test-x.npy", "y": "test-y.npy"},
               "num_classes": 2}, open(os.path.join(d, "dataset.json"), "w"), indent=1)


def write_subset(data, name, limit):
    """data/<name>-first<limit>/: the first `limit` train and limit/2 test examples of dataset `name`."""
    sub = f"{name}-first{limit}"
    d = os.path.join(data, sub)
    if os.path.exists(os.path.join(d, "dataset.json")):
        return sub
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pt_job  # the same loader the PyTorch side uses; keeps uint8 as uint8 via the raw readers
    os.makedirs(d, exist_ok=True)
    source = os.path.join(data, name, "dataset.json")
    manifest = {"num_classes": json.load(open(source)).get("num_classes", 10) if os.path.exists(source) else 10}
    for split, n in (("train", limit), ("test", max(1, limit // 2))):
        if name in ("mnist10k", "fashion", "fashion-mnist"):
            x, y = pt_job.load_builtin(data, name, split)
        else:
            x, y = pt_job.load_directory(data, name, split)
        np.save(os.path.join(d, f"{split}-x.npy"), np.ascontiguousarray(x[:n]))
        np.save(os.path.join(d, f"{split}-y.npy"), y[:n].astype(np.int64))
        manifest[split] = {"x": f"{split}-x.npy", "y": f"{split}-y.npy"}
    json.dump(manifest, open(os.path.join(d, "dataset.json"), "w"), indent=1)
    return sub


# Jobs that run only when --jobs names them: the pattern matches the job and holds its word here
# (--jobs tpu, --jobs causal, '^text-(causal|transformer)$'; --jobs cnn leaves tpu-cnn out).
OPT_IN = {"tpu-cnn": "tpu", "text-causal": "causal"}


def prepare(args):
    work, shared = args["--work"], args["--data"]
    pattern, epochs, limit = args.get("--jobs", ""), int(args.get("--epochs", 0)), int(args.get("--limit", 0))
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    for f in os.listdir(shared):
        src, dst = os.path.abspath(os.path.join(shared, f)), os.path.join(data, f)
        if os.path.isfile(src) and not os.path.lexists(dst):
            os.symlink(src, dst)
    write_tabular(data)
    write_sequences(data)
    os.makedirs(os.path.join(work, "specs"), exist_ok=True)
    selected = {k: v for k, v in jobs().items() if re.search(pattern, k) and (k not in OPT_IN or OPT_IN[k] in pattern)}
    if not selected:
        sys.exit(f"no job matches --jobs '{pattern}' (jobs: {', '.join(jobs())})")
    for job, (label, spec, full_epochs) in selected.items():
        spec = json.loads(json.dumps(spec))
        e = epochs or full_epochs
        spec["training"]["epochs"] = e
        spec["training"].pop("steps", None)
        if limit:
            spec["dataset"]["name"] = write_subset(data, spec["dataset"]["name"], limit)
            label += f" [first {limit} train examples]"
        spec.pop("backup", None)  # no checkpoints inside the timed runs
        for mode in ("sync", "async"):
            s = json.loads(json.dumps(spec))
            s["training"].update(mode=mode, workers=2, servers=2)
            json.dump(s, open(os.path.join(work, "specs", f"{job}-{mode}.json"), "w"), indent=1)
        json.dump(spec, open(os.path.join(work, "specs", f"{job}.json"), "w"), indent=1)
        print(f"{job}\t{label}\t{e}")


def parse(log):
    text = open(log).read()
    eps = [(int(e), float(s)) for e, s in re.findall(r"^epoch (\d+):.*\|\s*([\d.]+) samples/s", text, re.M)]
    if not eps:
        sys.exit(f"no per-epoch lines in {log}")
    after_warmup = [s for e, s in eps if e > 1]
    timed = after_warmup or [s for e, s in eps]
    m = re.findall(r"^final test accuracy: ([\d.]+)", text, re.M)
    if not m:
        sys.exit(f"no final test accuracy in {log}")
    print(f"{statistics.median(timed):.1f} {float(m[-1]):.4f} {len(after_warmup)}")


CONFIGS = ["ours-t1", "ours-t2", "sync-2x2", "async-2x2", "pt-t1", "pt-t2", "pt-ddp"]


# Cores each config computes on (a cluster's 2 workers x 1 thread, DDP's 2 processes).
CORES = {"ours-t1": 1, "ours-t2": 2, "sync-2x2": 2, "async-2x2": 2, "pt-t1": 1, "pt-t2": 2, "pt-ddp": 2}


def core_peak(level):
    """(GFLOPS of one core's float32 peak, how it was computed): cpu MHz x FLOPs per cycle of the
    level (two FMA units: 2 x 2 x 16 floats for AVX-512, 2 x 2 x 8 for AVX2 + FMA; SSE: a
    4-float add and multiply a cycle)."""
    info = open("/proc/cpuinfo").read()
    mhz = float(re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M).group(1))
    flags = set(re.search(r"^flags\s*:(.*)$", info, re.M).group(1).split())
    if level == "native":
        level = "x86-64-v4" if "avx512f" in flags else "x86-64-v3" if {"avx2", "fma"} <= flags else "x86-64"
    per_cycle = {"x86-64-v4": 64, "x86-64-v3": 32, "x86-64": 8}[level]
    return mhz * per_cycle / 1000, f"{mhz:.0f} MHz x {per_cycle} FLOPs/cycle ({level})"


def flops_table(med, order, labels, flops_file, level):
    flops = dict(line.rstrip("\n").split("\t") for line in open(flops_file))
    peak, how = core_peak(level)
    print("Achieved GFLOPS and fraction of peak (3 x forward FLOPs per example x samples/s; peak = cores x "
          f"{peak:.1f} GFLOPS a core: {how}):")
    print()
    print("| job | forward MFLOP / example | " + " | ".join(CONFIGS) + " |")
    print("|---|---|" + "---|" * len(CONFIGS))
    for job in order:
        f = float(flops.get(job, 0) or 0)
        cells = []
        for c in CONFIGS:
            if (job, c) not in med or f <= 0:
                cells.append("-")
                continue
            achieved = 3 * f * med[(job, c)] / 1e9
            cells.append(f"{achieved:.1f} ({100 * achieved / (peak * CORES[c]):.1f}%)")
        print(f"| {labels[job]} | {f / 1e6:.2f} | " + " | ".join(cells) + " |")
    print()


def table(results, repeats, flops_file=None, level="native"):
    rows, labels, order, wall = {}, {}, [], {}
    for line in open(results):
        job, label, config, rep, sps, acc, n, secs = line.rstrip("\n").split("\t")
        if job not in labels:
            order.append(job)
        labels[job] = label
        rows.setdefault((job, config), []).append((float(sps), float(acc), int(n)))
        wall[job] = wall.get(job, 0) + int(secs)
    med = {k: statistics.median(x[0] for x in v) for k, v in rows.items()}
    acc = {k: statistics.median(x[1] for x in v) for k, v in rows.items()}
    timed = min(x[2] for v in rows.values() for x in v)

    def sps(job, c):
        return f"{med[(job, c)]:,.0f}" if (job, c) in med else "-"

    def ratio(job, a, b):
        return f"{med[(job, a)] / med[(job, b)]:.2f}" if (job, a) in med and (job, b) in med and med[(job, b)] else "-"

    print("| job | ours 1 thr | ours 2 thr | sync 2x2 | async 2x2 | PyTorch 1 thr | PyTorch 2 thr | DDP 2x1 "
          "| sync / ours 1 thr | sync / DDP | ours / PyTorch 1 thr | ours / PyTorch 2 thr |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for job in order:
        print(f"| {labels[job]} | " + " | ".join(sps(job, c) for c in CONFIGS) + " | " +
              " | ".join([ratio(job, "sync-2x2", "ours-t1"), ratio(job, "sync-2x2", "pt-ddp"),
                          ratio(job, "ours-t1", "pt-t1"), ratio(job, "ours-t2", "pt-t2")]) + " |")
    print()
    if flops_file:
        flops_table(med, order, labels, flops_file, level)
    print("Final test accuracy (median over repeats):")
    print()
    print("| job | " + " | ".join(["ours 1 thr", "ours 2 thr", "sync 2x2", "async 2x2", "PyTorch 1 thr",
                                    "PyTorch 2 thr", "DDP 2x1"]) + " |")
    print("|---|" + "---|" * len(CONFIGS))
    for job in order:
        print(f"| {labels[job]} | " + " | ".join(f"{acc[(job, c)]:.4f}" if (job, c) in acc else "-"
                                                 for c in CONFIGS) + " |")
    print()
    print(f"samples/s: median over {repeats} repeat(s) of each run's figure = median of its per-epoch samples/s "
          f"without epoch 1 (here {timed} epoch(s) timed per run{'; epoch 1 only, warm-up included: not for comparison' if timed < 1 else ''}). "
          "Ours 1/2 thr: pstrain-train --threads N --parallelism batch. sync/async 2x2: 2 workers x 2 servers, "
          "1 compute thread per worker (the coordinator's epoch line: sum of the workers' rates, training steps "
          "only). PyTorch: tests/bench/pt_job.py on the same spec and files, --threads N; DDP: gloo, 2 processes "
          "x 1 thread, global batch split in two. Ratios of samples/s.")
    print()
    print("Wall time of the runs per job (all configs and repeats, start-up and evaluation included): " +
          ", ".join(f"{job} {wall[job]} s" for job in order) + ".")


def main():
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "prepare":
        prepare(dict(zip(rest[::2], rest[1::2])))
    elif cmd == "parse":
        parse(rest[0])
    elif cmd == "table":
        table(*rest)
    else:
        sys.exit(f"unknown subcommand {cmd}")


if __name__ == "__main__":
    main()
