"""pt_job.py — the PyTorch side of tests/bench/suite.sh: trains the job of a pstrain job spec (the same
JSON file pstrain-train and the cluster get) in PyTorch 1.13, standalone or with DistributedDataParallel.

What it takes from the spec: the dataset (by the name pstrain resolves, from the same files), the
model (a layer graph of dense / conv2d (use_bias) / maxpool2d / avgpool2d / global pooling /
flatten / relu / activation relu / batch_norm / dropout / random_flip (horizontal) / random_crop /
add / concatenate, and for sequences embedding (mask_zero) / position_embedding /
multi_head_attention (heads x key_dim = channels: PyTorch's MultiheadAttention, padding keys
masked) / lstm / gru (bidirectional, return_sequences; a mask as packed sequences) / layer_norm /
conv1d of kernel_size 1 / global 1-D pools (masked); named inputs as pstrain's; input_shape
[h, w, c] or [d]), the optimizer (adam,
adamw (weight_decay): learning_rate, beta_1, beta_2, epsilon; sgd: learning_rate, momentum,
nesterov; adagrad: learning_rate, epsilon, initial_accumulator_value; a cosine_decay schedule with
warm-up), the loss (sparse softmax cross-entropy, categorical with label_smoothing),
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

Usage: /usr/bin/python3 pt_job.py --spec JOB.json --data-dir DIR [--threads N] [--epochs E] [--max-steps S]
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


class Graph(nn.Module):
    """The spec's layers run in list order (which pstrain's graphs are written in here), each on
    the previous layer's output or on its named `inputs` (add, concatenate): pstrain's layer graph
    (Keras' functional API). Training-only layers (random_flip, random_crop, dropout) act in
    training mode only, as in pstrain."""

    def __init__(self, spec):
        super().__init__()
        shape = list(spec["model"]["input_shape"])
        self.steps = []  # (kind, module or args, input names, own name)
        self.mods = nn.ModuleList()
        shapes = {"input": ("image", shape[2], shape[0], shape[1]) if len(shape) == 3 else ("flat", int(np.prod(shape)))}
        prev = "input"
        for i, layer in enumerate(spec["model"]["layers"]):
            t = layer["type"]
            name = layer.get("name", str(i))
            inputs = layer.get("inputs", [prev])
            src = shapes[inputs[0]]
            mod, out = None, src
            if t == "conv2d":
                _, c, h, w = src
                k = layer["kernel_size"]
                k = (k, k) if isinstance(k, int) else tuple(k)
                st = layer.get("strides", 1)
                st = (st, st) if isinstance(st, int) else tuple(st)
                pad = layer.get("padding", "valid")
                if pad == "same" and st != (1, 1):
                    sys.exit("pt_job.py: padding 'same' with strides is not supported")
                mod = nn.Conv2d(c, layer["filters"], k, stride=st, padding=pad, bias=layer.get("use_bias", True))
                if pad == "valid":
                    h, w = (h - k[0]) // st[0] + 1, (w - k[1]) // st[1] + 1
                out = ("image", layer["filters"], h, w)
            elif t in ("maxpool2d", "avgpool2d"):
                _, c, h, w = src
                p_ = layer.get("pool_size", 2)
                p_ = (p_, p_) if isinstance(p_, int) else tuple(p_)
                st = layer.get("strides", p_)
                st = (st, st) if isinstance(st, int) else tuple(st)
                mod = (nn.MaxPool2d if t == "maxpool2d" else nn.AvgPool2d)(p_, stride=st)
                out = ("image", c, (h - p_[0]) // st[0] + 1, (w - p_[1]) // st[1] + 1)
            elif t in ("global_avgpool2d", "global_maxpool2d"):
                mod = nn.Sequential(nn.AdaptiveAvgPool2d(1) if t == "global_avgpool2d" else nn.AdaptiveMaxPool2d(1),
                                    nn.Flatten())
                out = ("flat", src[1])
            elif t == "flatten":
                if src[0] == "image":
                    mod = nn.Flatten()
                    out = ("flat", src[1] * src[2] * src[3])
            elif t == "dense":
                if src[0] == "image":
                    sys.exit("pt_job.py: a dense layer on an image needs a flatten before it")
                mod = nn.Linear(src[-1], layer["units"])  # (over a sequence: each step)
                out = ("seq", src[1], layer["units"]) if src[0] == "seq" else ("flat", layer["units"])
            elif t == "batch_norm":
                # Keras' momentum m is PyTorch's 1 - m; Keras' epsilon.
                bn = nn.BatchNorm2d if src[0] == "image" else nn.BatchNorm1d
                mod = bn(src[1], eps=layer.get("epsilon", 1e-3), momentum=1 - layer.get("momentum", 0.99))
            elif t == "dropout":
                mod = nn.Dropout(layer["rate"])
            elif t in ("activation", "relu"):
                mod = nn.Identity()
            elif t == "embedding":
                mod = Embedding(layer["input_dim"], layer["output_dim"])
                out = ("seq", src[1], layer["output_dim"])
            elif t == "position_embedding":
                mod = PositionEmbedding(src[1], src[2])
            elif t == "multi_head_attention":
                if layer["num_heads"] * layer["key_dim"] != src[2] or layer.get("value_dim", layer["key_dim"]) != layer["key_dim"]:
                    sys.exit("pt_job.py: multi_head_attention needs num_heads x key_dim == channels (PyTorch's layer)")
                mod = SelfAttention(src[2], layer["num_heads"], layer.get("use_bias", True), layer.get("use_causal_mask", False))
            elif t in ("lstm", "gru"):
                mod = Recurrent(t, src[2], layer["units"], layer.get("bidirectional", False), layer.get("return_sequences", False))
                width = layer["units"] * (2 if layer.get("bidirectional", False) else 1)
                out = ("seq", src[1], width) if layer.get("return_sequences", False) else ("flat", width)
            elif t == "layer_norm":
                mod = nn.LayerNorm(src[-1], eps=layer.get("epsilon", 1e-3))
            elif t == "conv1d":
                if layer["kernel_size"] not in (1, [1]):
                    sys.exit("pt_job.py: conv1d of kernel_size 1 only (a per-step dense)")
                mod = nn.Linear(src[2], layer["filters"], bias=layer.get("use_bias", True))
                out = ("seq", src[1], layer["filters"])
            elif t in ("global_avgpool1d", "global_maxpool1d"):
                mod = MaskedPool(t == "global_avgpool1d")
                out = ("flat", src[2])
            elif t == "random_flip":
                if layer.get("mode", "horizontal") != "horizontal":
                    sys.exit("pt_job.py: random_flip supports mode horizontal only")
                mod = RandomFlip()
            elif t == "random_crop":
                mod = RandomCrop(layer.get("padding", 0))
            elif t == "add":
                mod = None
            elif t == "concatenate":
                mod = None
                out = (src[0], sum(shapes[n][1] for n in inputs)) + tuple(src[2:])
            else:
                sys.exit(f"layer type {t!r} not supported by pt_job.py")
            act = layer.get("activation", "relu" if t == "relu" else "linear")
            if mod is not None:
                self.mods.append(mod)
            self.steps.append((t, len(self.mods) - 1 if mod is not None else -1, inputs, name, act,
                               t == "embedding" and layer.get("mask_zero", False)))
            shapes[name] = out
            prev = name
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x):
        values, masks = {"input": x}, {"input": None}
        for t, m, inputs, name, act, mask_zero in self.steps:
            # pstrain's mask rules (model_spec.h mask_sources): set by a mask_zero embedding, kept by
            # the layers that keep their steps, read by the ones that take it.
            mask = masks.get(inputs[0])
            if t == "add":
                mask = next((masks[n] for n in inputs if masks.get(n) is not None), None)
            elif t == "embedding":
                mask = (x != 0) if mask_zero else None
            elif t not in MASK_KEEPERS and not (t in ("lstm", "gru") and self.mods[m].sequences):
                mask = None
            masks[name] = mask
            if t in MASK_TAKERS:
                values[name] = self.mods[m](values[inputs[0]], masks.get(inputs[0]))
                continue
            if t == "add":
                y = values[inputs[0]]
                for n in inputs[1:]:
                    y = y + values[n]
            elif t == "concatenate":
                y = torch.cat([values[n] for n in inputs], dim=1)
            else:
                y = values[inputs[0]]
                if m >= 0:
                    y = self.mods[m](y)
            if act == "relu":
                y = F.relu(y)
            elif act not in ("linear", None):
                sys.exit(f"activation {act!r} not supported by pt_job.py")
            values[name] = y
        return y


MASK_TAKERS = ("multi_head_attention", "lstm", "gru", "global_avgpool1d", "global_maxpool1d")
MASK_KEEPERS = ("position_embedding", "multi_head_attention", "layer_norm", "dropout", "activation", "relu", "dense")


class Embedding(nn.Embedding):
    """Keras' Embedding on float ids (the datasets' float32 values): uniform(-0.05, 0.05) rows."""

    def __init__(self, n, d):
        super().__init__(n, d)
        nn.init.uniform_(self.weight, -0.05, 0.05)

    def forward(self, x):
        return super().forward(x.long())


class PositionEmbedding(nn.Module):
    def __init__(self, steps, channels):
        super().__init__()
        self.positions = nn.Parameter(torch.empty(steps, channels).uniform_(-0.05, 0.05))

    def forward(self, x):
        return x + self.positions


class SelfAttention(nn.Module):
    """PyTorch's MultiheadAttention on one sequence, padding keys masked (key_padding_mask)."""

    def __init__(self, channels, heads, bias, causal):
        super().__init__()
        self.attention = nn.MultiheadAttention(channels, heads, bias=bias, batch_first=True)
        self.causal = causal

    def forward(self, x, mask):
        s = x.shape[1]
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1) if self.causal else None
        y, _ = self.attention(x, x, x, key_padding_mask=None if mask is None else ~mask, attn_mask=causal,
                              need_weights=False)
        return y


class Recurrent(nn.Module):
    """LSTM or GRU, one or two directions; a mask of trailing padding as packed sequences."""

    def __init__(self, cell, channels, units, bidirectional, sequences):
        super().__init__()
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(channels, units, batch_first=True, bidirectional=bidirectional)
        self.sequences = sequences
        for name, w in self.rnn.named_parameters():  # Keras: Glorot kernels, orthogonal recurrent, zero biases
            if name.startswith("weight_ih"):
                nn.init.xavier_uniform_(w)
            elif name.startswith("weight_hh"):
                nn.init.orthogonal_(w)
            else:
                nn.init.zeros_(w)

    def forward(self, x, mask):
        steps = x.shape[1]
        if mask is not None:
            x = nn.utils.rnn.pack_padded_sequence(x, mask.sum(1).clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        y, state = self.rnn(x)
        if self.sequences:
            return nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=steps)[0] if mask is not None else y
        h = state[0] if isinstance(state, tuple) else state
        return torch.cat(list(h), dim=1)


class MaskedPool(nn.Module):
    """Global average or maximum over the steps ([N, S, C] -> [N, C]), over the unmasked ones."""

    def __init__(self, average):
        super().__init__()
        self.average = average

    def forward(self, x, mask):
        if mask is None:
            return x.mean(1) if self.average else x.amax(1)
        m = mask.unsqueeze(2).to(x.dtype)
        if self.average:
            return (x * m).sum(1) / m.sum(1).clamp(min=1)
        return x.masked_fill(m == 0, float("-inf")).amax(1)


class RandomFlip(nn.Module):
    """Each example mirrored left-right with probability 1/2 (training only)."""

    def forward(self, x):
        if not self.training:
            return x
        mask = torch.rand(x.shape[0]) < 0.5
        x = x.clone()
        x[mask] = x[mask].flip(-1)
        return x


class RandomCrop(nn.Module):
    """Zero-padded by `padding` on every side, then cropped back at a random offset per example."""

    def __init__(self, padding):
        super().__init__()
        self.padding = padding

    def forward(self, x):
        if not self.training or self.padding == 0:
            return x
        n, _, h, w = x.shape
        p = self.padding
        padded = F.pad(x, (p, p, p, p))
        dy = torch.randint(0, 2 * p + 1, (n,))
        dx = torch.randint(0, 2 * p + 1, (n,))
        rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None].expand(n, x.shape[1], h, w)
        cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :].expand(n, x.shape[1], h, w)
        ch = torch.arange(x.shape[1])[None, :, None, None].expand(n, x.shape[1], h, w)
        idx = torch.arange(n)[:, None, None, None].expand(n, x.shape[1], h, w)
        return padded[idx, ch, rows, cols]


def build_model(spec):
    """The spec's model: a layer graph taking [n, c, h, w] images or [n, d] vectors."""
    return Graph(spec)


def learning_rate_factor(spec):
    """A function of the step giving the learning rate, for LambdaLR (base lr 1): Keras'
    CosineDecay with warm-up, or a constant."""
    lr = spec["optimizer"].get("learning_rate", 1e-3)
    if not isinstance(lr, dict):
        return None
    if lr.get("schedule") != "cosine_decay":
        sys.exit(f"schedule {lr.get('schedule')!r} not supported by pt_job.py")
    import math
    init, warm = lr.get("initial_learning_rate", 0.0), lr.get("warmup_steps", 0)
    target, decay, alpha = lr.get("warmup_target", init), lr["decay_steps"], lr.get("alpha", 0.0)

    def f(step):
        if step < warm:
            return init + (target - init) * step / warm
        t = min(step - warm, decay) / decay
        return target * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * t)) + alpha)
    return f


def make_optimizer(spec, params):
    o = spec["optimizer"]
    t = o["type"]
    if t == "adam":
        return torch.optim.Adam(params, lr=o.get("learning_rate", 1e-3),
                                betas=(o.get("beta_1", 0.9), o.get("beta_2", 0.999)), eps=o.get("epsilon", 1e-7))
    if t == "sgd":
        return torch.optim.SGD(params, lr=o.get("learning_rate", 0.01), momentum=o.get("momentum", 0.0),
                               nesterov=o.get("nesterov", False))
    if t == "adamw":
        return torch.optim.AdamW(params, lr=1.0 if isinstance(o.get("learning_rate"), dict) else o.get("learning_rate", 1e-3),
                                 betas=(o.get("beta_1", 0.9), o.get("beta_2", 0.999)), eps=o.get("epsilon", 1e-7),
                                 weight_decay=o.get("weight_decay", 0.004))
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
    mixed = (a.precision or spec.get("precision", "float32")) == "mixed_bfloat16"
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
    factor = learning_rate_factor(spec)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor) if factor is not None else None
    loss_spec = spec.get("loss", "sparse_softmax_cross_entropy")
    smoothing = loss_spec.get("label_smoothing", 0.0) if isinstance(loss_spec, dict) else 0.0
    steps = 0
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
        seen_examples = 0
        for i in range(0, n, gb):
            if a.max_steps and steps >= a.max_steps:
                break
            g = perm[i:i + gb]
            seen_examples += len(g)
            if world > 1:
                k = (len(g) + world - 1) // world
                g = g[rank * k:(rank + 1) * k]
            xb, yb = xtr[g], ytr[g]
            # --precision mixed_bfloat16 (or the spec's "precision"): CPU autocast to bfloat16 (its
            # convolutions and matrix products), the loss in float32, as Keras' mixed policy.
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
                logits = model(xb)
            loss = F.cross_entropy(logits.float(), yb, label_smoothing=smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if schedule is not None:
                schedule.step()
            steps += 1
            loss_sum += loss.item() * len(g)
            correct += (logits.argmax(1) == yb).sum().item()
        if world > 1:
            dist.barrier()
        dt = time.perf_counter() - t0
        if rank == 0:
            acc = evaluate(model.module if world > 1 else model, xte, yte)
            sps.append(seen_examples / dt)
            accs.append(acc)
            # rank 0's own loss and accuracy (its slice of each batch) under DDP
            seen = seen_examples if world == 1 else max(1, seen_examples // world)
            print(f"epoch {ep}: train loss {loss_sum / seen:.4f} accuracy {correct / seen:.4f} | test loss - "
                  f"accuracy {acc:.4f} | {seen_examples / dt:.0f} samples/s ({dt:.2f} s)", flush=True)
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
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: every epoch)")
    ap.add_argument("--ddp", type=int, default=0, help="DDP gloo with this many processes (0: one process)")
    ap.add_argument("--port", type=int, default=19590, help="DDP rendezvous port")
    ap.add_argument("--precision", choices=["float32", "mixed_bfloat16"], default=None,
                    help="default: the spec's precision (float32 when it has none)")
    a = ap.parse_args()
    spec = json.load(open(a.spec))
    loss = spec.get("loss", "sparse_softmax_cross_entropy")
    loss_type = loss.get("type") if isinstance(loss, dict) else loss
    if loss_type not in ("sparse_softmax_cross_entropy", "categorical_cross_entropy"):
        sys.exit(f"loss {loss_type!r} not supported by pt_job.py")
    if a.ddp > 1:
        import torch.multiprocessing as mp
        mp.spawn(ddp_entry, args=(a, spec), nprocs=a.ddp, join=True)
    else:
        train(a, spec)


if __name__ == "__main__":
    main()
