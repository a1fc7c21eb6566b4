#!/usr/bin/python3
"""The synthetic click log (clicklog.py) as users have it: a CSV whose 26 id columns hold strings
("c3_1f2a"), uploaded through PUT to a running cluster, so that the columns with more than 65,536
distinct values become id columns (stored as fingerprints) and the others categories; then a job
that hashes every id column (the type-level "categorical": {"encode": "hash"} covers both) into
sparse tables, trained on the cluster, and :predict by field name with ids no row held.
Prints one JSON line of figures (docs/BENCHMARKS.md "Id columns from a CSV"):
upload seconds, each column's type and distinct estimate against the true count, the job's
samples/s, test AUC and log loss (the same job's metrics are comparable to the numeric-id run's).

  /usr/bin/python3 tests/bench/clicklog_csv.py --data /tmp/dd/clicks-big --url http://127.0.0.1:8180 \\
      --rows 2000000 --work /tmp/clicklog-csv
(tests/bench/clicklog_csv.sh starts and stops the cluster around it; PSTRAIN_TOKEN: a bearer token.)
"""
import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clicklog  # noqa: E402

IDS_AT = clicklog.NUMERIC


def id_text(j, ids):
    return [f"c{j}_{int(v):x}" for v in ids]


def write_csv(path, x, y, rows, block=1 << 16):
    """Rows of x (numbers, then ids as exact floats) and y as CSV text with string ids."""
    head = [f"n{j}" for j in range(clicklog.NUMERIC)] + [f"c{j}" for j in range(clicklog.CATEGORICAL)] + ["click"]
    with open(path, "w") as f:
        f.write(",".join(head) + "\n")
        for start in range(0, rows, block):
            xb = np.asarray(x[start:start + block])
            yb = np.asarray(y[start:start + block])
            numbers = [[f"{v:.6g}" for v in col] for col in xb[:, :IDS_AT].T]
            ids = [id_text(j, xb[:, IDS_AT + j]) for j in range(clicklog.CATEGORICAL)]
            cols = numbers + ids + [[str(int(v)) for v in yb]]
            f.write("\n".join(",".join(r) for r in zip(*cols)) + "\n")


TOKEN = os.environ.get("PSTRAIN_TOKEN", "")


def request(url, method, path, body=None, ctype="application/json", stream=None, size=0):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    headers = {"Content-Type": ctype}
    if TOKEN:
        headers["Authorization"] = f"Bearer {TOKEN}"
    if stream is not None:
        headers["Content-Length"] = str(size)
        c.request(method, path, body=stream, headers=headers)
    else:
        c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        raise SystemExit(f"{method} {path}: {r.status} {data[:400]!r}")
    return json.loads(data) if data else None


def upload(url, name, split, path):
    with open(path, "rb") as f:
        start = time.monotonic()
        request(url, "PUT", f"/v1/datasets/{name}/{split}?label=click", stream=f, size=os.path.getsize(path), ctype="text/csv")
        return time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a directory clicklog.py wrote")
    ap.add_argument("--url", required=True)
    ap.add_argument("--work", required=True, help="where the CSV files go")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--test-rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--max-bins", type=int, default=1 << 20, help="num_bins of a column: min(its cardinality, this)")
    ap.add_argument("--name", default="clicks-csv")
    ap.add_argument("--lookup", type=int, default=0,
                    help="look every id column up among its K most frequent ids (encode ids, max_categories K) "
                         "instead of hashing it; categorical columns keep all their categories")
    ap.add_argument("--upload", default="", help="a dataset already uploaded under --name: skip writing and uploading")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    x = np.load(os.path.join(args.data, "train_x.npy"), mmap_mode="r")
    y = np.load(os.path.join(args.data, "train_y.npy"), mmap_mode="r")
    tx = np.load(os.path.join(args.data, "test_x.npy"), mmap_mode="r")
    ty = np.load(os.path.join(args.data, "test_y.npy"), mmap_mode="r")
    rows, test_rows = min(args.rows, len(y)), min(args.test_rows, len(ty))
    train_csv, test_csv = os.path.join(args.work, "train.csv"), os.path.join(args.work, "test.csv")
    figures = {"rows": rows, "test_rows": test_rows}
    if not args.upload:
        write_csv(train_csv, x, y, rows)
        write_csv(test_csv, tx, ty, test_rows)
        figures["csv_bytes"] = os.path.getsize(train_csv)
        figures["upload_train_s"] = round(upload(args.url, args.name, "train", train_csv), 1)
        figures["upload_test_s"] = round(upload(args.url, args.name, "test", test_csv), 1)
    record = request(args.url, "GET", f"/v1/datasets/{args.name}")
    columns = {c["name"]: c for c in record["splits"]["train"]["table"]["columns"]}
    cards = clicklog.cardinalities(10_000_000)
    profile = []
    for j in range(clicklog.CATEGORICAL):
        c = columns[f"c{j}"]
        true = int(len(np.unique(np.asarray(x[:rows, IDS_AT + j]))))
        estimate = c.get("distinct_estimate", c.get("distinct"))
        profile.append({"column": f"c{j}", "type": c["type"], "distinct": true, "reported": estimate})
    figures["columns"] = profile
    bins = [min(cards[j], args.max_bins) for j in range(clicklog.CATEGORICAL)]
    steps = {f"c{j}": {"encode": "hash", "num_bins": bins[j]} for j in range(clicklog.CATEGORICAL)}
    if args.lookup:  # slots: K kept ids (or every category) and the other slot
        for j, p in enumerate(profile):
            keep = args.lookup if p["type"] == "id" else p["distinct"]
            steps[f"c{j}"] = {"encode": "ids", "max_categories": keep}
            bins[j] = keep + 1
    layers = [{"name": "numbers", "type": "slice", "begin": 0, "size": IDS_AT, "inputs": ["input"]},
              {"name": "numbers_dense", "type": "dense", "units": 16, "activation": "relu", "inputs": ["numbers"]}]
    parts = ["numbers_dense"]
    for j in range(clicklog.CATEGORICAL):
        layers += [{"name": f"id{j}", "type": "slice", "begin": IDS_AT + j, "size": 1, "inputs": ["input"]},
                   {"name": f"table{j}", "type": "embedding", "input_dim": bins[j], "output_dim": args.dim,
                    "sparse": True, "combiner": "sum", "inputs": [f"id{j}"]}]
        parts.append(f"table{j}")
    layers += [{"name": "all", "type": "concatenate", "inputs": parts},
               {"name": "hidden1", "type": "dense", "units": 64, "activation": "relu", "inputs": ["all"]},
               {"name": "hidden2", "type": "dense", "units": 32, "activation": "relu", "inputs": ["hidden1"]},
               {"name": "logit", "type": "dense", "units": 1, "inputs": ["hidden2"]}]
    spec = {"name": f"{args.name}-{'lookup' if args.lookup else 'hashed'}", "dataset": {"name": args.name, "shuffle_seed": 1},
            "model": {"input_shape": [IDS_AT + clicklog.CATEGORICAL], "seed": 1, "layers": layers},
            "loss": "binary_cross_entropy", "optimizer": {"type": "adagrad", "learning_rate": 0.2},
            "training": {"mode": "sync", "global_batch_size": 512, "epochs": 1, "workers": args.workers,
                         "servers": args.servers},
            "preprocessing": {"numeric": {"indicator": False},
                              "categorical": {"encode": "hash", "num_bins": 1, "indicator": False},
                              "columns": steps}}
    for _ in range(60):  # (the coordinator may still be waiting for its nodes: 503)
        try:
            job = request(args.url, "POST", "/v1/jobs", json.dumps(spec).encode())["id"]
            break
        except SystemExit as e:
            if " 503 " not in str(e):
                raise
            time.sleep(1)
    start = time.monotonic()
    while True:
        state = request(args.url, "GET", f"/v1/jobs/{job}")
        if state["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(2)
    figures["job_s"] = round(time.monotonic() - start, 1)
    figures["state"] = state["state"]
    for key in ("test_auc", "test_log_loss", "test_accuracy", "samples_per_second", "notes"):
        if key in state:
            figures[key] = state[key]
    # By field name, with ids no row held (every fourth record's user-like c25 is new).
    instances = []
    for i in range(200):
        rec = {f"n{j}": float(tx[i, j]) for j in range(IDS_AT)}
        rec |= {f"c{j}": id_text(j, [tx[i, IDS_AT + j]])[0] for j in range(clicklog.CATEGORICAL)}
        if i % 4 == 0:
            rec["c25"] = f"never-seen-{i}"
        instances.append(rec)
    answer = request(args.url, "POST", f"/v1/models/{job}:predict", json.dumps({"instances": instances}).encode())
    figures["predictions"] = len(answer["predictions"])
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
