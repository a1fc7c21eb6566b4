#!/usr/bin/python3
"""A forward pass of a pstrain model with NumPy only, as a user would write it from the docs.

Usage: numpy_forward.py MODEL.safetensors SPEC.json INPUTS.npy OUT.npy
  MODEL.safetensors  GET /v1/jobs/{id}/model
  SPEC.json          the job spec (its "model" part is used)
  INPUTS.npy         float32, shape (n, *input_shape)
  OUT.npy            written: float32 softmax probabilities, shape (n, classes)

Layers: dense, conv2d (strides, padding valid|same as TensorFlow), maxpool2d, flatten, reshape,
relu. Kernels are in TensorFlow's shapes: dense [in, out], conv2d [kh, kw, in, out].
"""
import json
import math
import struct
import sys

import numpy as np


def load_safetensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    return {k: np.frombuffer(blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}


def pair(v, default):
    if v is None:
        return default
    return (v, v) if isinstance(v, int) else tuple(v)


def window(size, k, stride, padding):
    """Output size and leading padding of one axis, TensorFlow's rules."""
    if padding == "same":
        out = math.ceil(size / stride)
        total = max((out - 1) * stride + k - size, 0)
        return out, total // 2
    return (size - k) // stride + 1, 0


def conv2d(x, kernel, bias, strides, padding):
    n, h, w, c = x.shape
    kh, kw, _, f = kernel.shape
    oh, ph = window(h, kh, strides[0], padding)
    ow, pw = window(w, kw, strides[1], padding)
    padded = np.zeros((n, h + kh + strides[0] * oh, w + kw + strides[1] * ow, c), np.float64)
    padded[:, ph:ph + h, pw:pw + w, :] = x
    out = np.zeros((n, oh, ow, f), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = padded[:, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1], :]
            out += patch @ kernel[i, j].astype(np.float64)
    return out + bias


def maxpool(x, pool, strides):
    n, h, w, c = x.shape
    oh = (h - pool[0]) // strides[0] + 1
    ow = (w - pool[1]) // strides[1] + 1
    out = np.full((n, oh, ow, c), -np.inf)
    for i in range(pool[0]):
        for j in range(pool[1]):
            out = np.maximum(out, x[:, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1], :])
    return out


def forward(model, tensors, x):
    x = x.astype(np.float64)
    for i, layer in enumerate(model["layers"]):
        t = layer["type"]
        if t == "dense":
            x = x.reshape(x.shape[0], -1) @ tensors[f"layers.{i}.kernel"].astype(np.float64) + tensors[f"layers.{i}.bias"]
        elif t == "conv2d":
            k = tensors[f"layers.{i}.kernel"]
            x = conv2d(x, k, tensors[f"layers.{i}.bias"], pair(layer.get("strides"), (1, 1)), layer.get("padding", "valid"))
        elif t == "maxpool2d":
            pool = pair(layer.get("pool_size"), (2, 2))
            x = maxpool(x, pool, pair(layer.get("strides"), pool))
        elif t == "flatten":
            x = x.reshape(x.shape[0], -1)
        elif t == "reshape":
            x = x.reshape((x.shape[0],) + tuple(layer["target_shape"]))
        elif t == "relu":
            x = np.maximum(x, 0)
        if layer.get("activation") == "relu":
            x = np.maximum(x, 0)
    x = x - x.max(axis=1, keepdims=True)
    e = np.exp(x)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def main():
    model_path, spec_path, inputs_path, out_path = sys.argv[1:5]
    spec = json.load(open(spec_path))
    np.save(out_path, forward(spec["model"], load_safetensors(model_path), np.load(inputs_path)))


if __name__ == "__main__":
    main()
