#!/usr/bin/python3
"""A seeded synthetic click log, Criteo-like (issue 51's benchmark data; docs/BENCHMARKS.md).

Each row: 13 numeric features (log-normal counts, log1p-scaled as Criteo pipelines do) and 26
categorical ids, column j's drawn from a power law (P(id) proportional to 1 / (id + 1)) over
cardinalities log-spaced from 10 to --max-cardinality (10 million by default); the label is drawn
from a hidden logistic model: a bias, a weight per numeric feature and a weight per (column, id)
that is a hash of the pair (so no table of 10 million weights is kept). Because the label's
probability is known, the best achievable AUC and log loss on the test split are printed (those
of the true probabilities), and written to <out>/oracle.json.

Written as a dropped-in dataset directory: <out>/dataset.json, train_x.npy (float32 [n, 39]:
the 13 numbers, then the 26 ids as exact float32 integers), train_y.npy (int32 0/1), and the same
for test. Rows are generated in blocks of --block, so memory stays bounded by a block.

  /usr/bin/python3 tests/bench/clicklog.py --out data/clicks --rows 50000000 --test-rows 1000000
"""
import argparse
import json
import math
import os

import numpy as np

NUMERIC, CATEGORICAL = 13, 26
MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x):
    """SplitMix64's finaliser over a uint64 array (wrapping arithmetic)."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x


def unit(x):
    """uint64 -> float64 in [0, 1)."""
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def cardinalities(max_card):
    return [int(round(10 ** (1 + (math.log10(max_card) - 1) * j / (CATEGORICAL - 1)))) for j in range(CATEGORICAL)]


def id_weight(seed, column, ids):
    """The hidden model's weight of (column, id): normal-ish (sum of 4 uniforms), scale 0.5."""
    with np.errstate(over="ignore"):
        base = splitmix64(ids.astype(np.uint64) * np.uint64(0x100000001B3) ^ np.uint64(seed * 1000003 + column))
    total = np.zeros(ids.shape, dtype=np.float64)
    h = base
    for _ in range(4):
        h = splitmix64(h)
        total += unit(h)
    return (total - 2.0) * math.sqrt(3.0) * 0.5


def block(rng, seed, cards, numeric_w, bias, n):
    numbers = np.log1p(rng.lognormal(mean=1.0, sigma=1.2, size=(n, NUMERIC)))
    ids = np.empty((n, CATEGORICAL), dtype=np.int64)
    logit = np.full(n, bias) + (numbers - 1.2) @ numeric_w
    for j, c in enumerate(cards):
        u = rng.random(n)
        col = np.floor(np.exp(u * math.log(c + 1.0))).astype(np.int64) - 1
        np.clip(col, 0, c - 1, out=col)
        ids[:, j] = col
        logit += id_weight(seed, j, col)
    p = 1.0 / (1.0 + np.exp(-logit))
    y = (rng.random(n) < p).astype(np.int32)
    x = np.concatenate([numbers.astype(np.float32), ids.astype(np.float32)], axis=1)
    return x, y, p


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def write_split(out, name, rows, rng, seed, cards, numeric_w, bias, block_rows):
    x_path, y_path = os.path.join(out, f"{name}_x.npy"), os.path.join(out, f"{name}_y.npy")
    x_map = np.lib.format.open_memmap(x_path, mode="w+", dtype=np.float32, shape=(rows, NUMERIC + CATEGORICAL))
    y_map = np.lib.format.open_memmap(y_path, mode="w+", dtype=np.int32, shape=(rows,))
    probs = []
    for start in range(0, rows, block_rows):
        n = min(block_rows, rows - start)
        x, y, p = block(rng, seed, cards, numeric_w, bias, n)
        x_map[start:start + n] = x
        y_map[start:start + n] = y
        if name == "test":
            probs.append(p)
    x_map.flush()
    y_map.flush()
    del x_map, y_map
    return np.concatenate(probs) if probs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=100_000)
    ap.add_argument("--max-cardinality", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--block", type=int, default=1 << 18)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cards = cardinalities(args.max_cardinality)
    rng = np.random.default_rng(args.seed)
    numeric_w = rng.normal(0.0, 0.3, NUMERIC)
    bias = -1.5  # about a quarter of the rows are clicks, as in Criteo
    write_split(args.out, "train", args.rows, rng, args.seed, cards, numeric_w, bias, args.block)
    p = write_split(args.out, "test", args.test_rows, rng, args.seed, cards, numeric_w, bias, args.block)
    y = np.load(os.path.join(args.out, "test_y.npy"))
    eps = 1e-12
    oracle = {
        "rows": args.rows, "test_rows": args.test_rows, "seed": args.seed, "cardinalities": cards,
        "test_positive_rate": float(y.mean()),
        "oracle_auc": auc(p, y),
        "oracle_log_loss": float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))),
    }
    with open(os.path.join(args.out, "dataset.json"), "w") as f:
        json.dump({"train": {"x": "train_x.npy", "y": "train_y.npy"}, "test": {"x": "test_x.npy", "y": "test_y.npy"}}, f)
    with open(os.path.join(args.out, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=1)
    print(json.dumps(oracle))


if __name__ == "__main__":
    main()
