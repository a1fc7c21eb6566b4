#!/usr/bin/python3
"""ASHA against grid search over the same configurations, on a running cluster (study_bench.sh
starts one): each study is submitted with POST /v1/studies and followed to its end; the table
gives each one's best validation accuracy, that trial's test accuracy, the worker-seconds its
trial jobs used (workers x seconds running), the wall time, and ASHA's share of grid's
worker-seconds. The studies alternate (asha, grid, asha, grid, ...) so that both see the same
machine; stdlib only.

Usage: study_bench.py URL [--repeat N] [--epochs E] [--concurrency C] [--factor F]   (PSTRAIN_TOKEN: a token)
"""
import argparse
import json
import os
import sys
import time
import urllib.request


def call(url, method, path, body=None):
    headers = {"Content-Type": "application/json"}
    if os.environ.get("PSTRAIN_TOKEN"):
        headers["Authorization"] = "Bearer " + os.environ["PSTRAIN_TOKEN"]
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url + path, data=data, headers=headers, method=method)) as r:
        return json.loads(r.read())


def study(algorithm, epochs, concurrency, factor):
    spec = {
        "name": "fashion-mlp",
        "dataset": {"name": "fashion-mnist", "shuffle_seed": 1},
        "model": {"input_shape": [28, 28, 1], "seed": 7, "layers": [
            {"type": "flatten"}, {"type": "dense", "units": 128, "activation": "relu"}, {"type": "dense", "units": 10}]},
        "optimizer": {"type": "sgd", "learning_rate": 0.05, "momentum": 0.9},
        "training": {"mode": "sync", "global_batch_size": 128, "epochs": epochs, "workers": 1, "servers": 1,
                     "validation_fraction": 0.1},
    }
    s = {
        "name": algorithm, "spec": spec, "metric": "val_accuracy", "max_concurrent_trials": concurrency,
        "search_space": {
            "/optimizer/learning_rate": {"choice": [0.001, 0.01, 0.05, 0.2]},
            "/model/layers/1/units": {"choice": [32, 128]},
            "/optimizer/momentum": {"choice": [0.0, 0.9]},
        },
    }
    if algorithm == "grid":
        s["algorithm"] = "grid"
    else:
        s["algorithm"] = "asha"
        s["asha"] = {"min_epochs": 1, "max_epochs": epochs, "reduction_factor": factor, "grid": True}
    return s


def run(url, algorithm, epochs, concurrency, factor):
    start = time.time()
    created = call(url, "POST", "/v1/studies", study(algorithm, epochs, concurrency, factor))
    sid = created["id"]
    while True:
        s = call(url, "GET", "/v1/studies/" + sid)
        if s["state"] != "RUNNING":
            break
        time.sleep(2)
    wall = time.time() - start
    if s["state"] != "SUCCEEDED":
        sys.exit(f"study {sid} ended {s['state']}: {s.get('reason')}")
    best = s["best"]
    job = call(url, "GET", "/v1/jobs/" + best["job"])
    epochs_run = sum(t["epochs"] for t in s["trials"])
    jobs = sum(len(t["rungs"]) for t in s["trials"])
    return {"id": sid, "algorithm": algorithm, "best_val": best["metric"], "best_test": job["test_accuracy"],
            "best_trial": best["trial"], "best_params": best["parameters"], "worker_seconds": s["worker_seconds"],
            "trial_epochs": epochs_run, "jobs": jobs, "trials": len(s["trials"]), "wall": wall}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--factor", type=int, default=3, help="ASHA's reduction_factor (the API's default: 3)")
    a = p.parse_args()
    rows = []
    for i in range(a.repeat):
        for algorithm in ("asha", "grid"):
            r = run(a.url, algorithm, a.epochs, a.concurrency, a.factor)
            print(json.dumps(r), flush=True)
            rows.append(r)
    print()
    print("| run | algorithm | trials | jobs | trial-epochs | best val_accuracy | its test_accuracy | worker-seconds | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        print(f"| {i // 2 + 1} | {r['algorithm']} | {r['trials']} | {r['jobs']} | {r['trial_epochs']} | {r['best_val']:.4f} | "
              f"{r['best_test']:.4f} | {r['worker_seconds']:.0f} | {r['wall']:.0f} |")
    for i in range(0, len(rows), 2):
        asha, grid = rows[i], rows[i + 1]
        print(f"run {i // 2 + 1}: ASHA best val_accuracy {asha['best_val']:.4f} vs grid {grid['best_val']:.4f} "
              f"({100 * (asha['best_val'] - grid['best_val']):+.2f} points); ASHA used "
              f"{100 * asha['worker_seconds'] / grid['worker_seconds']:.1f}% of grid's worker-seconds")


if __name__ == "__main__":
    main()
