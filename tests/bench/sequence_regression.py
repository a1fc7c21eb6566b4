"""A sequence regression on a local cluster: an LSTM against a linear autoregressive baseline.

The series (seeded, 24,000 steps): a self-exciting threshold autoregression (SETAR: its dynamics
switch with the sign of the last value, which no linear model captures) plus a slow seasonal term
and Gaussian noise. Examples are windows of the 24 last values, the target the next value; the
first 80% of windows (in time) train, the last 20% test. Uploaded as .npz (x [n, 24], y [n, 1]
float: a regression dataset). The model: reshape [24] -> [24, 1], lstm 32, dense 1, mean squared
error. The baselines, fitted in NumPy on the same training windows: the last value (persistence)
and a least-squares AR(24) with an intercept. Test RMSE of each.

Usage (sequence_regression.sh runs it): sequence_regression.py --url URL --work DIR [--workers 2]
[--servers 2] [--epochs 20]
"""
import argparse
import io
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import text_corpora  # noqa: E402  (its request() and TOKEN)

WINDOW = 24


def series(n=24000, seed=5):
    rng = np.random.default_rng(seed)
    y = np.zeros(n)
    for t in range(2, n):
        if y[t - 1] > 0:
            y[t] = 0.6 * y[t - 1] - 0.4 * y[t - 2] - 0.3
        else:
            y[t] = -0.5 * y[t - 1] + 0.3 * y[t - 2] + 0.6
        y[t] += 0.5 * np.sin(2 * np.pi * t / 96) + 0.1 * rng.standard_normal()
    return y.astype(np.float32)


def windows(y):
    x = np.lib.stride_tricks.sliding_window_view(y[:-1], WINDOW).astype(np.float32)
    return x, y[WINDOW:].reshape(-1, 1).astype(np.float32)


def npz_bytes(x, y):
    b = io.BytesIO()
    np.savez(b, x=x, y=y)
    return b.getvalue()


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a, dtype=np.float64).ravel() - np.asarray(b, dtype=np.float64).ravel()) ** 2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20)
    a = ap.parse_args()
    x, y = windows(series())
    cut = int(0.8 * len(x))
    xtr, ytr, xte, yte = x[:cut], y[:cut], x[cut:], y[cut:]
    print(f"series: {len(xtr)} training windows, {len(xte)} test, window {WINDOW}", flush=True)
    for split, (xs, ys) in (("train", (xtr, ytr)), ("test", (xte, yte))):
        text_corpora.request(a.url, "PUT", f"/v1/datasets/series/{split}", npz_bytes(xs, ys), "application/x-npz")
    persistence = rmse(xte[:, -1], yte)
    design = np.hstack([xtr, np.ones((len(xtr), 1), dtype=np.float32)]).astype(np.float64)
    coef, *_ = np.linalg.lstsq(design, ytr.astype(np.float64), rcond=None)
    ar = rmse(np.hstack([xte, np.ones((len(xte), 1))]) @ coef, yte)
    spec = {"name": "series-lstm", "dataset": {"name": "series", "shuffle_seed": 3},
            "model": {"input_shape": [WINDOW], "seed": 4, "layers": [
                {"type": "reshape", "target_shape": [WINDOW, 1]},
                {"type": "lstm", "units": 32}, {"type": "dense", "units": 1}]},
            "loss": {"type": "mean_squared_error"},
            "optimizer": {"type": "adam", "learning_rate": 0.005},
            "training": {"mode": "sync", "global_batch_size": 64, "epochs": a.epochs, "workers": a.workers, "servers": a.servers}}
    start = time.monotonic()
    job = text_corpora.request(a.url, "POST", "/v1/jobs", json.dumps(spec))["id"]
    done = text_corpora.wait(a.url, job)
    took = time.monotonic() - start
    if done["state"] != "SUCCEEDED":
        raise SystemExit(f"the job {done['state']}: {done.get('reason', '')}")
    print("\n| model | test RMSE | seconds |")
    print("|---|---|---|")
    print(f"| persistence (the last value) | {persistence:.4f} | |")
    print(f"| linear AR({WINDOW}) with intercept (NumPy least squares) | {ar:.4f} | |")
    print(f"| lstm 32 -> dense 1, {a.epochs} epochs | {done['test_rmse']:.4f} | {took:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
