"""clicklog_pt.py — the click-log model of clicklog_job.py in PyTorch, one process: the 13 numbers
through Linear(13, 16) + ReLU, each of the 26 id columns through nn.EmbeddingBag(cardinality, dim,
mode="sum", sparse=True) (one id a row: the bag is the row), everything concatenated into an MLP
64-32-1 with one logit, binary cross-entropy on logits (mean over the batch), Adagrad on every
parameter (sparse gradients for the tables: only the rows a batch holds are updated), Keras'
Adagrad constants (initial accumulator 0.1, epsilon 1e-7). Kernels Glorot-uniform, biases zero,
tables uniform in [-0.05, 0.05] (pstrain's and Keras' initialisers; the seeds differ).

Reads the dataset directory clicklog.py wrote (train_x.npy, train_y.npy, test_x.npy, test_y.npy,
oracle.json). Batches in a seeded shuffled order. Prints the lines pstrain-train prints:
  epoch E: train loss L accuracy A | test loss T accuracy A auc U | S samples/s (D s)
samples/s = training examples / wall time of the epoch's training steps (evaluation excluded).

Usage: /usr/bin/python3 clicklog_pt.py --data DIR [--threads N] [--epochs E] [--batch B]
         [--learning-rate R] [--dim D]
(with . /work/shared/bench/pytorch/openblas_env.sh sourced, as tests/bench/suite.sh runs PyTorch)
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def auc(scores, labels):
    """The area under the ROC curve, exact (ranks; ties share their mean rank)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    s = scores[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


class ClickModel(nn.Module):
    def __init__(self, cards, dim):
        super().__init__()
        self.numbers = nn.Linear(13, 16)
        self.tables = nn.ModuleList(nn.EmbeddingBag(c, dim, mode="sum", sparse=True) for c in cards)
        self.hidden1 = nn.Linear(16 + dim * len(cards), 64)
        self.hidden2 = nn.Linear(64, 32)
        self.logit = nn.Linear(32, 1)
        for layer in (self.numbers, self.hidden1, self.hidden2, self.logit):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
        for t in self.tables:
            nn.init.uniform_(t.weight, -0.05, 0.05)

    def forward(self, x):
        ids = x[:, 13:].long()
        parts = [F.relu(self.numbers(x[:, :13]))]
        for j, t in enumerate(self.tables):
            parts.append(t(ids[:, j:j + 1]))
        h = F.relu(self.hidden1(torch.cat(parts, dim=1)))
        h = F.relu(self.hidden2(h))
        return self.logit(h).squeeze(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--learning-rate", type=float, default=0.2)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with open(os.path.join(args.data, "oracle.json")) as f:
        cards = json.load(f)["cardinalities"]
    x = torch.from_numpy(np.load(os.path.join(args.data, "train_x.npy")).astype(np.float32))
    y = torch.from_numpy(np.load(os.path.join(args.data, "train_y.npy")).astype(np.float32).reshape(-1))
    tx = torch.from_numpy(np.load(os.path.join(args.data, "test_x.npy")).astype(np.float32))
    ty = np.load(os.path.join(args.data, "test_y.npy")).astype(np.float32).reshape(-1)
    model = ClickModel(cards, args.dim)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.learning_rate, initial_accumulator_value=0.1, eps=1e-7)
    rng = np.random.default_rng(args.seed)
    n = x.shape[0]
    rates = []
    for epoch in range(1, args.epochs + 1):
        order = torch.from_numpy(rng.permutation(n))
        loss_sum, correct = 0.0, 0
        start = time.perf_counter()
        for b in range(0, n, args.batch):
            idx = order[b:b + args.batch]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            logits = model(xb)
            loss = F.binary_cross_entropy_with_logits(logits, yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            correct += int(((logits > 0).float() == yb).sum())
        seconds = time.perf_counter() - start
        rates.append(n / seconds)
        with torch.no_grad():
            logits = torch.cat([model(tx[b:b + 4096]) for b in range(0, tx.shape[0], 4096)]).numpy()
        p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
        eps = 1e-7
        test_loss = float(-np.mean(ty * np.log(np.clip(p, eps, 1)) + (1 - ty) * np.log(np.clip(1 - p, eps, 1))))
        test_acc = float(np.mean((logits > 0) == (ty == 1)))
        print(f"epoch {epoch}: train loss {loss_sum / n:.4f} accuracy {correct / n:.4f} | test loss {test_loss:.4f} "
              f"accuracy {test_acc:.4f} auc {auc(logits, ty):.4f} | {n / seconds:.0f} samples/s ({seconds:.2f} s)",
              flush=True)
    print("RESULT " + json.dumps({"threads": args.threads, "samples_per_second": rates[-1]}))


if __name__ == "__main__":
    main()
