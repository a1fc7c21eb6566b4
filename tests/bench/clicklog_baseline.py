#!/usr/bin/python3
"""The click log's baseline (issue 51): a hashed logistic regression fitted in numpy on the same
split a job trains on. Features: the 13 numbers (standardised with the first block's statistics)
and every (column, id) pair hashed into --bins weights (SplitMix64 of the pair, mod bins), trained
by Adagrad on the summed-over-the-batch loss / batch, one pass (or --epochs) in the file's order,
in blocks read from the .npy files (memory: the weights and one block). Prints test AUC and log
loss beside the oracle's (clicklog.py's oracle.json).

  /usr/bin/python3 tests/bench/clicklog_baseline.py --data data/clicks
"""
import argparse
import json
import os

import numpy as np

from clicklog import NUMERIC, CATEGORICAL, auc, splitmix64


def hashed(ids, bins):
    cols = np.arange(ids.shape[1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = splitmix64(ids.astype(np.uint64) * np.uint64(0x100000001B3) ^ (cols * np.uint64(0x9E3779B97F4A7C15)))
    return (h % np.uint64(bins)).astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--bins", type=int, default=1 << 22)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--learning-rate", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--block", type=int, default=1 << 18)
    args = ap.parse_args()
    x = np.load(os.path.join(args.data, "train_x.npy"), mmap_mode="r")
    y = np.load(os.path.join(args.data, "train_y.npy"), mmap_mode="r")
    first = np.asarray(x[: min(len(x), args.block), :NUMERIC], dtype=np.float64)
    mean, std = first.mean(axis=0), first.std(axis=0) + 1e-12
    w_num, acc_num = np.zeros(NUMERIC), np.full(NUMERIC, 0.1)
    w_ids, acc_ids = np.zeros(args.bins), np.full(args.bins, 0.1)
    bias, acc_bias = 0.0, 0.1
    for _ in range(args.epochs):
        for start in range(0, len(x), args.block):
            xb = np.asarray(x[start:start + args.block])
            yb = np.asarray(y[start:start + args.block], dtype=np.float64)
            nums = (xb[:, :NUMERIC] - mean) / std
            rows = hashed(xb[:, NUMERIC:].astype(np.int64), args.bins)
            for b in range(0, len(xb), args.batch):
                n, r = nums[b:b + args.batch], rows[b:b + args.batch]
                z = bias + n @ w_num + w_ids[r].sum(axis=1)
                g = (1.0 / (1.0 + np.exp(-z)) - yb[b:b + args.batch]) / len(n)
                g_num, g_bias = n.T @ g, g.sum()
                g_ids = np.bincount(r.ravel(), weights=np.repeat(g, CATEGORICAL), minlength=args.bins)
                touched = np.unique(r)
                acc_num += g_num ** 2
                w_num -= args.learning_rate * g_num / np.sqrt(acc_num)
                acc_bias += g_bias ** 2
                bias -= args.learning_rate * g_bias / np.sqrt(acc_bias)
                acc_ids[touched] += g_ids[touched] ** 2
                w_ids[touched] -= args.learning_rate * g_ids[touched] / np.sqrt(acc_ids[touched])
    xt = np.load(os.path.join(args.data, "test_x.npy"))
    yt = np.load(os.path.join(args.data, "test_y.npy"))
    z = bias + ((xt[:, :NUMERIC] - mean) / std) @ w_num + w_ids[hashed(xt[:, NUMERIC:].astype(np.int64), args.bins)].sum(axis=1)
    p = np.clip(1.0 / (1.0 + np.exp(-z)), 1e-12, 1 - 1e-12)
    with open(os.path.join(args.data, "oracle.json")) as f:
        oracle = json.load(f)
    print(json.dumps({"baseline": "hashed logistic regression", "bins": args.bins, "epochs": args.epochs,
                      "test_auc": auc(p, yt), "test_log_loss": float(-np.mean(yt * np.log(p) + (1 - yt) * np.log(1 - p))),
                      "oracle_auc": oracle["oracle_auc"], "oracle_log_loss": oracle["oracle_log_loss"]}))


if __name__ == "__main__":
    main()
