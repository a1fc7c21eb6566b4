"""A PyTorch reference for the engine's multi_head_attention (common/engine/nn/attention.h).

attention_test.cc writes, for one layer, a manifest (case.json: batch, steps, channels, heads,
key_dim, value_dim, causal, use_bias, and "keep": each example's steps, 1 kept, 0 padding) and
float64 arrays: the input x [batch, steps, channels], the upstream gradient dout, the Keras-layout
tensors (query/key/value kernels [channels, heads, width] and biases [heads, width], the output
kernel [heads, value_dim, channels] and bias [channels]) and the engine's output and gradients.
This computes Keras' formulas with autograd in float64: scores Q K^T / sqrt(key_dim) per head, key
j allowed for query i when both steps are kept and (causal) j <= i, softmax over the allowed keys
(Keras 3: a query with none has zero weights), the heads' contexts through the output kernel; then
backward of sum(out * dout). Exits 1 when any value differs from the engine's by more than 1e-9.

Usage: /usr/bin/python3 attention_reference.py CASE_DIR
"""
import json
import os
import sys

import numpy as np
import torch


def main(case_dir):
    case = json.load(open(os.path.join(case_dir, "case.json")))
    read = lambda name, shape: np.fromfile(os.path.join(case_dir, name + ".f64"), dtype="<f8").reshape(shape)
    B, S, C, H, K, V = (case[k] for k in ("batch", "steps", "channels", "heads", "key_dim", "value_dim"))
    shapes = {"query": (C, H, K), "key": (C, H, K), "value": (C, H, V), "output": (H, V, C)}
    bias_shapes = {"query": (H, K), "key": (H, K), "value": (H, V), "output": (C,)}
    parts = list(shapes)
    tensor = lambda a: torch.tensor(a, requires_grad=True)
    x = tensor(read("x", (B, S, C)))
    w = {p: tensor(read(p + "_kernel", shapes[p])) for p in parts}
    b = {p: tensor(read(p + "_bias", bias_shapes[p])) for p in parts} if case["use_bias"] else None

    def project(p):
        y = torch.einsum("bsc,chk->bhsk", x, w[p])
        return y + b[p][None, :, None, :] if b else y

    q, k, v = project("query"), project("key"), project("value")
    keep = torch.tensor(case["keep"], dtype=torch.bool)  # [B, S]
    allowed = keep[:, :, None] & keep[:, None, :]  # [B, query, key]
    if case["causal"]:
        allowed = allowed & torch.tril(torch.ones(S, S, dtype=torch.bool))[None]
    allowed = allowed[:, None]  # over the heads
    scores = torch.einsum("bhik,bhjk->bhij", q, k) / np.sqrt(K)
    weights = torch.softmax(scores.masked_fill(~allowed, -1e30), dim=-1) * allowed
    context = torch.einsum("bhij,bhjv->bhiv", weights, v)
    out = torch.einsum("bhiv,hvc->bic", context, w["output"])
    if b:
        out = out + b["output"]
    dout = torch.tensor(read("dout", (B, S, C)))
    (out * dout).sum().backward()

    failures = []

    def compare(name, ours, theirs):
        diff = float(np.max(np.abs(ours - theirs)))
        print("%s %s: max difference %.3g" % (case["name"], name, diff))
        if not diff <= 1e-9:
            failures.append(name)

    compare("output", read("out", (B, S, C)), out.detach().numpy())
    compare("input gradient", read("din", (B, S, C)), x.grad.numpy())
    for p in parts:
        compare(p + " kernel gradient", read("d" + p + "_kernel", shapes[p]), w[p].grad.numpy())
        if b:
            compare(p + " bias gradient", read("d" + p + "_bias", bias_shapes[p]), b[p].grad.numpy())
    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
