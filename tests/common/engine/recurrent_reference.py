"""PyTorch's LSTM and GRU as the reference of the engine's (common/engine/nn/recurrent.h).

recurrent_test.cc writes, for one layer, a manifest (case.json) and float64 arrays: the input
x [batch, steps, channels], the upstream gradient dout, each direction's Keras-layout tensors
(kernel [channels, G units], recurrent_kernel [units, G units], bias), and the engine's output
and gradients. This builds torch.nn.LSTM / torch.nn.GRU (float64) with the same weights (Keras' gate
order i, f, c, o is PyTorch's; Keras' GRU z, r, h is PyTorch's r, z, n reordered, reset_after being
PyTorch's only form; an LSTM's bias goes to bias_ih, bias_hh zero), runs forward and backward of
sum(out * dout) (with "lengths", over packed sequences: the engine's mask of trailing padding), and exits 1 when any value differs from the engine's by more than 1e-9 (float64
on both sides: the formulas, not rounding, are compared).

Usage: /usr/bin/python3 recurrent_reference.py CASE_DIR
"""
import json
import os
import sys

import numpy as np
import torch


def main(case_dir):
    case = json.load(open(os.path.join(case_dir, "case.json")))
    read = lambda name, shape: np.fromfile(os.path.join(case_dir, name + ".f64"), dtype="<f8").reshape(shape)
    batch, steps, channels, units = case["batch"], case["steps"], case["channels"], case["units"]
    lstm = case["cell"] == "lstm"
    gates = 4 if lstm else 3
    directions = 2 if case["bidirectional"] else 1
    width = directions * units
    x = torch.tensor(read("x", (batch, steps, channels)), requires_grad=True)
    cls = torch.nn.LSTM if lstm else torch.nn.GRU
    layer = cls(channels, units, batch_first=True, bidirectional=case["bidirectional"]).double()

    def reorder(rows):  # Keras' gate blocks to PyTorch's
        if lstm:
            return rows
        z, r, h = np.split(rows, 3, axis=0)
        return np.concatenate([r, z, h], axis=0)

    with torch.no_grad():
        for d in range(directions):
            suffix = "_l0" + ("_reverse" if d == 1 else "")
            kernel = read("kernel%d" % d, (channels, gates * units))
            recurrent = read("recurrent%d" % d, (units, gates * units))
            bias = read("bias%d" % d, (gates * units,) if lstm else (2, gates * units))
            getattr(layer, "weight_ih" + suffix).copy_(torch.tensor(reorder(kernel.T)))
            getattr(layer, "weight_hh" + suffix).copy_(torch.tensor(reorder(recurrent.T)))
            if lstm:
                getattr(layer, "bias_ih" + suffix).copy_(torch.tensor(bias))
                getattr(layer, "bias_hh" + suffix).zero_()
            else:
                getattr(layer, "bias_ih" + suffix).copy_(torch.tensor(reorder(bias[0])))
                getattr(layer, "bias_hh" + suffix).copy_(torch.tensor(reorder(bias[1])))
    lengths = case.get("lengths")  # a mask of trailing padding: PyTorch's packed sequences
    if lengths:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
        packed_out, state = layer(packed)
        sequence, _ = torch.nn.utils.rnn.pad_packed_sequence(packed_out, batch_first=True, total_length=steps)
    else:
        sequence, state = layer(x)
    h_n = state[0] if lstm else state
    if case["return_sequences"]:
        out = sequence  # [batch, steps, width], the backward direction aligned to its steps
    else:
        out = torch.cat([h_n[d] for d in range(directions)], dim=1)  # [batch, width]
    dout = torch.tensor(read("dout", tuple(out.shape)))
    (out * dout).sum().backward()

    failures = []

    def compare(name, ours, theirs):
        diff = float(np.max(np.abs(ours - theirs)))
        print("%s %s: max difference %.3g" % (case["name"], name, diff))
        if not diff <= 1e-9:
            failures.append(name)

    compare("output", read("out", tuple(out.shape)), out.detach().numpy())
    compare("input gradient", read("din", (batch, steps, channels)), x.grad.numpy())
    for d in range(directions):
        suffix = "_l0" + ("_reverse" if d == 1 else "")
        back = lambda g: reorder(g.numpy()).T  # PyTorch's rows back to Keras' columns
        w_ih = getattr(layer, "weight_ih" + suffix).grad
        w_hh = getattr(layer, "weight_hh" + suffix).grad
        compare("kernel gradient %d" % d, read("dkernel%d" % d, (channels, gates * units)), back(w_ih))
        compare("recurrent gradient %d" % d, read("drecurrent%d" % d, (units, gates * units)), back(w_hh))
        b_ih = reorder(getattr(layer, "bias_ih" + suffix).grad.numpy())
        if lstm:
            compare("bias gradient %d" % d, read("dbias%d" % d, (gates * units,)), b_ih)
        else:
            b_hh = reorder(getattr(layer, "bias_hh" + suffix).grad.numpy())
            compare("bias gradient %d" % d, read("dbias%d" % d, (2, gates * units)), np.stack([b_ih, b_hh]))
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
