"""pt_job.py — the PyTorch side of tests/bench/suite.sh: trains the job of a pstrain job spec (the same
JSON file pstrain-train and the cluster get) in PyTorch 1.13, standalone or with DistributedDataParallel.

What it takes from the spec: the dataset (by the name pstrain resolves, from the same files), the
model (layers dense / conv2d / maxpool2d / flatten / relu, input_shape [h, w, c] or [d]), the
optimizer (adam: learning_rate, beta_1, beta_2, epsilon; sgd: learning_rate, momentum, nesterov;
adagrad: learning_rate, epsilon, initial_accumulator_value), the loss (sparse softmax cross-entropy),
training.global_batch_size and training.epochs. Kernels Glorot-uniform, biases zero (Keras' and
pstrain's initialisation; the seeds differ, the distributions do not). Images are NCHW here and
NHWC in pstrain: the same layers and parameter counts, another memory order.

Datasets (as common/data/dataset.cc resolves them, DATA = --data-dir):
  mnist10k, fashion   DATA/<name>-{train,test}-{images-idx3,labels-idx1}-ubyte[.gz]
  fashion-mnist       DATA/fashion-mnist/ or /usr/share/datasets/fashion-mnist/ {train,t10k}-...
  anything else       the dataset directory DATA/<name>/dataset.json (.npy pairs and .npz; uint8
                      examples scaled by 1/255, float32 as they are)

Output (the lines pstrain-train prints, so one parser reads both):
  epoch E: train loss L accuracy A | test loss - accuracy T | S samples/s (D s)
  final test accuracy: T
  RESULT {json}
samples/s of an epoch = training examples / wall time of its training steps (evaluation excluded;
DDP: the whole cluster's examples, barrier before and after the epoch).

Usage: /usr/bin/python3 pt_job.py --spec JOB.json --data-dir DIR [--threads N] [--epochs E]
                                  [--ddp WORLD --port P]   (DDP gloo over 127.0.0.1, N threads each)
"""
import argparse, gzip, json, os, struct, sys, time, zipfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: only uint8 IDX files are supported")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(directory, base):
    for name in (base, base + ".gz"):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    return None


def load_builtin(data_dir, name, split):
    if name in ("mnist10k", "fashion"):
        dirs, prefix = [data_dir], f"{name}-{split}"
    else:  # fashion-mnist: the official split, local copy first, then Debian's package
        dirs, prefix = [os.path.join(data_dir, "fashion-mnist"), "/usr/share/datasets/fashion-mnist"], \
            "train" if split == "train" else "t10k"
    for d in dirs:
        images, labels = find(d, prefix + "-images-idx3-ubyte"), find(d, prefix + "-labels-idx1-ubyte")
        if images and labels:
            return read_idx(images)[..., None], read_idx(labels).astype(np.int64)
    sys.exit(f"dataset {name}: {prefix}-images-idx3-ubyte[.gz] not found in {dirs}")


def load_directory(data_dir, name, split):
    d = os.path.join(data_dir, name)
    manifest = json.load(open(os.path.join(d, "dataset.json")))
    files = manifest.get(split)
    if files is None:
        sys.exit(f"{d}/dataset.json: no '{split}' split")
    if "x" in files:
        x, y = np.load(os.path.join(d, files["x"])), np.load(os.path.join(d, files["y"]))
    elif "npz" in files:
        z = np.load(os.path.join(d, files["npz"]))
        x, y = z["x"], z["y"]
    elif "images" in files:
        x, y = read_idx(os.path.join(d, files["images"]))[..., None], read_idx(os.path.join(d, files["labels"]))
    else:
        sys.exit(f"{d}/dataset.json: split '{split}' is in a format pt_job.py does not read (CSV)")
    return x, y.astype(np.int64)


def load(data_dir, name, split):
    """-> float32 examples [n, *shape] (uint8 scaled by 1/255) and int64 labels."""
    if name in ("mnist10k", "fashion", "fashion-mnist"):
        x, y = load_builtin(data_dir, name, split)
    else:
        x, y = load_directory(data_dir, name, split)
    x = x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)
    return x, y


def build_model(spec):
    """The spec's layers as an nn.Sequential taking [n, c, h, w] images or [n, d] vectors."""
    shape = list(spec["model"]["input_shape"])
    image = len(shape) == 3
    c, h, w = (shape[2], shape[0], shape[1]) if image else (None, None, None)
    flat = None if image else int(np.prod(shape))
    mods = []

    def activation(layer):
        a = layer.get("activation", "linear")
        if a == "relu":
            mods.append(nn.ReLU())
        elif a not in ("linear", None):
            sys.exit(f"activation {a!r} not supported by pt_job.py")

    for layer in spec["model"]["layers"]:
        t = layer["type"]
        if t == "conv2d":
            k = layer["kernel_size"]
            k = (k, k) if isinstance(k, int) else tuple(k)
            s = layer.get("strides", 1)
            s = (s, s) if isinstance(s, int) else tuple(s)
            pad = layer.get("padding", "valid")
            if pad == "same" and s != (1, 1):
                sys.exit("pt_job.py: padding 'same' with strides is not supported")
            mods.append(nn.Conv2d(c, layer["filters"], k, stride=s, padding=pad))
            c = layer["filters"]
            if pad == "valid":
                h, w = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
            activation(layer)
        elif t == "maxpool2d":
            p = layer.get("pool_size", 2)
            p = (p, p) if isinstance(p, int) else tuple(p)
            s = layer.get("strides", p)
            s = (s, s) if isinstance(s, int) else tuple(s)
            mods.append(nn.MaxPool2d(p, stride=s))
            h, w = (h - p[0]) // s[0] + 1, (w - p[1]) // s[1] + 1
        elif t == "flatten":
            if image:
                mods.append(nn.Flatten())
                flat, image = c * h * w, False
        elif t == "dense":
            if image:
                sys.exit("pt_job.py: a dense layer on an image needs a flatten before it")
            mods.append(nn.Linear(flat, layer["units"]))
            flat = layer["units"]
            activation(layer)
        elif t == "relu":
            mods.append(nn.ReLU())
        else:
            sys.exit(f"layer type {t!r} not supported by pt_job.py")
    model = nn.Sequential(*mods)
    for m in model:
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def make_optimizer(spec, params):
    o = spec["optimizer"]
    t = o["type"]
    if t == "adam":
        return torch.optim.Adam(params, lr=o.get("learning_rate", 1e-3),
                                betas=(o.get("beta_1", 0.9), o.get("beta_2", 0.999)), eps=o.get("epsilon", 1e-7))
    if t == "sgd":
        return torch.optim.SGD(params, lr=o.get("learning_rate", 0.01), momentum=o.get("momentum", 0.0),
                               nesterov=o.get("nesterov", False))
    if t == "adagrad":
        return torch.optim.Adagrad(params, lr=o.get("learning_rate", 1e-3), eps=o.get("epsilon", 1e-7),
                                   initial_accumulator_value=o.get("initial_accumulator_value", 0.1))
    sys.exit(f"optimizer {t!r} not supported by pt_job.py")


@torch.no_grad()
def evaluate(model, x, y, bs=1000):
    model.eval()
    correct = 0
    for i in range(0, len(x), bs):
        correct += (model(x[i:i + bs]).argmax(1) == y[i:i + bs]).sum().item()
    model.train()
    return correct / len(x)


def tensors(a, spec):
    xtr, ytr = load(a.data_dir, spec["dataset"]["name"], "train")
    xte, yte = load(a.data_dir, spec["dataset"]["name"], "test")
    if xtr.ndim == 4:  # NHWC -> NCHW
        xtr, xte = xtr.transpose(0, 3, 1, 2).copy(), xte.transpose(0, 3, 1, 2).copy()
    return map(torch.from_numpy, (xtr, ytr, xte, yte))


def train(a, spec, rank=0, world=1):
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(a.port)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    xtr, ytr, xte, yte = tensors(a, spec)
    seed = int(spec["model"].get("seed", 0))
    torch.manual_seed(seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = build_model(spec)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    opt = make_optimizer(spec, model.parameters())
    gb = int(spec["training"]["global_batch_size"])
    epochs = a.epochs or int(spec["training"].get("epochs", 1))
    n = len(xtr)
    rng = np.random.default_rng(int(spec["dataset"].get("shuffle_seed", seed)))
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"torch {torch.__version__} threads={torch.get_num_threads()} world={world} params={params} "
              f"train={n} test={len(xte)} batch={gb} epochs={epochs}", flush=True)
    sps, accs = [], []
    for ep in range(1, epochs + 1):
        perm = torch.from_numpy(rng.permutation(n))  # the same on every rank
        loss_sum, correct = 0.0, 0
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        for i in range(0, n, gb):
            g = perm[i:i + gb]
            if world > 1:
                k = (len(g) + world - 1) // world
                g = g[rank * k:(rank + 1) * k]
            xb, yb = xtr[g], ytr[g]
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(g)
            correct += (logits.argmax(1) == yb).sum().item()
        if world > 1:
            dist.barrier()
        dt = time.perf_counter() - t0
        if rank == 0:
            acc = evaluate(model.module if world > 1 else model, xte, yte)
            sps.append(n / dt)
            accs.append(acc)
            # rank 0's own loss and accuracy (its slice of each batch) under DDP
            seen = n if world == 1 else max(1, n // world)
            print(f"epoch {ep}: train loss {loss_sum / seen:.4f} accuracy {correct / seen:.4f} | test loss - "
                  f"accuracy {acc:.4f} | {n / dt:.0f} samples/s ({dt:.2f} s)", flush=True)
    if rank == 0:
        print(f"final test accuracy: {accs[-1]:.4f}")
        print("RESULT " + json.dumps({"bench": "pt_job", "job": spec.get("name"), "threads": a.threads,
                                      "world": world, "samples_per_second_by_epoch": sps,
                                      "test_accuracy": accs, "final_test_accuracy": accs[-1]}), flush=True)
    if world > 1:
        dist.destroy_process_group()


def ddp_entry(rank, a, spec):
    train(a, spec, rank, a.ddp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=0, help="0: the spec's training.epochs")
    ap.add_argument("--ddp", type=int, default=0, help="DDP gloo with this many processes (0: one process)")
    ap.add_argument("--port", type=int, default=19590, help="DDP rendezvous port")
    a = ap.parse_args()
    spec = json.load(open(a.spec))
    if spec.get("loss", "sparse_softmax_cross_entropy") != "sparse_softmax_cross_entropy":
        sys.exit(f"loss {spec['loss']!r} not supported by pt_job.py")
    if a.ddp > 1:
        import torch.multiprocessing as mp
        mp.spawn(ddp_entry, args=(a, spec), nprocs=a.ddp, join=True)
    else:
        train(a, spec)


if __name__ == "__main__":
    main()
