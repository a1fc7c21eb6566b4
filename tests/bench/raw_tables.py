#!/usr/bin/python3
"""Real tables uploaded as they come, trained with the default preprocessing, against a baseline.

  tests/bench/raw_tables.py --url http://127.0.0.1:18080 [--token T] [--work DIR]

Two tables Debian packages ship (fetched with `apt-get download` into WORK/.debs, unpacked there;
nothing installed):
  penguins  r-cran-palmerpenguins extdata/penguins.csv, unedited: string species label, text island
            and sex, NA cells, features from 13 to 6,300. Rows split 80/20 by a seeded permutation
            and uploaded as two CSV files of the original lines (header kept).
  cars      python3-vega-datasets cars.json (Keras' "Basic regression" table) written as CSV as a
            user would export it: every field, nulls as empty cells, the car's name and origin as
            text; label Miles_per_Gallon (rows without it left out: a label cannot be missing).
Each is uploaded to the cluster at --url, trained by a job with no preprocessing section (the
defaults: standardize + mean + indicator, one-hot up to 20 categories + other), evaluated on its
test split, and asked for predictions by field name. The baseline is fitted in numpy on the same
train split with the same default preprocessing: multinomial logistic regression (L2 1e-4,
Newton's method) for penguins, least squares for cars. Prints one RESULT line per table.
"""
import argparse
import csv
import io
import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np

PENGUINS = ("r-cran-palmerpenguins", "usr/lib/R/site-library/palmerpenguins/extdata/penguins.csv")
CARS = ("python3-vega-datasets", "usr/lib/python3/dist-packages/vega_datasets/_data/cars.json")
SEED = 20261127
MISSING = {"", "NA", "N/A", "NaN", "nan", "null", "NULL", "?"}


def package_file(work, package, path):
    """deploy/reference-tables.py's: the installed file, else the package's .deb unpacked in WORK/.debs."""
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("reference_tables", os.path.join(here, "../../deploy/reference-tables.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.package_file(work, package, path)


class Api:
    def __init__(self, url, token):
        self.url, self.token = url.rstrip("/"), token

    def call(self, method, path, body=None, content_type="application/json"):
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")


def split_lines(text, seed):
    lines = text.splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    order = np.random.default_rng(seed).permutation(len(rows))
    cut = int(round(len(rows) * 0.8))
    return header + "".join(rows[i] for i in sorted(order[:cut])), header + "".join(rows[i] for i in sorted(order[cut:]))


def records(text):
    return list(csv.DictReader(io.StringIO(text)))


def is_number(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def default_features(train_rows, rows, label, max_categories=20):
    """The service's default preprocessing (preprocessing.h), in numpy, fitted on train_rows."""
    columns = [c for c in train_rows[0].keys() if c != label]
    blocks_train, blocks = [], []
    for c in columns:
        present = [r[c] for r in train_rows if r[c] not in MISSING]
        numeric = all(is_number(v) for v in present)
        boolean = not numeric and all(v.lower() in ("true", "false", "yes", "no") for v in present)
        # Free text (most values distinct and of three words or more) is a text column: not a feature.
        if not numeric and not boolean and 2 * len(set(present)) > len(present) and \
                2 * sum(v.count(" ") >= 2 for v in present) > len(present):
            continue
        has_missing = any(r[c] in MISSING for r in train_rows)

        def encode(rs):
            if numeric or boolean:
                conv = (lambda v: float(v)) if numeric else (lambda v: 1.0 if v.lower() in ("true", "yes") else 0.0)
                vals = np.array([np.nan if r[c] in MISSING else conv(r[c]) for r in rs])
                return vals
            return [None if r[c] in MISSING else r[c] for r in rs]

        tr, al = encode(train_rows), encode(rows)
        if numeric or boolean:
            fill = np.nanmean(tr) if numeric else np.bincount(tr[~np.isnan(tr)].astype(int)).argmax()
            ftr, fal = np.where(np.isnan(tr), fill, tr), np.where(np.isnan(al), fill, al)
            if numeric:
                mean, std = ftr.mean(), ftr.std()
                std = std if std > 0 else 1.0
                ftr, fal = (ftr - mean) / std, (fal - mean) / std
            bt, ba = [ftr[:, None]], [fal[:, None]]
            miss_t, miss_a = np.isnan(tr), np.isnan(al)
        else:
            counts = {}
            for v in tr:
                if v is not None:
                    counts[v] = counts.get(v, 0) + 1
            ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            kept = sorted(k for k, _ in ranked[:max_categories])
            fill = ranked[0][0]

            def onehot(vs):
                m = np.zeros((len(vs), len(kept) + 1))
                for i, v in enumerate(vs):
                    v = fill if v is None else v
                    m[i, kept.index(v) if v in kept else len(kept)] = 1
                return m
            bt, ba = [onehot(tr)], [onehot(al)]
            miss_t = np.array([v is None for v in tr])
            miss_a = np.array([v is None for v in al])
        if has_missing:
            bt.append(miss_t[:, None].astype(float))
            ba.append(miss_a[:, None].astype(float))
        blocks_train += bt
        blocks += ba
    return np.hstack(blocks_train), np.hstack(blocks)


def logistic(x, y, classes, l2=1e-4, iterations=50):
    n, d = x.shape
    x1 = np.hstack([x, np.ones((n, 1))])
    w = np.zeros((d + 1, classes))
    onehot = np.eye(classes)[y]
    for _ in range(iterations):
        z = x1 @ w
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        grad = x1.T @ (p - onehot) / n + l2 * w
        # Newton on the flattened weights (small problems).
        h = np.zeros(((d + 1) * classes, (d + 1) * classes))
        for a in range(classes):
            for b in range(classes):
                s = p[:, a] * ((a == b) - p[:, b])
                h[a::classes, b::classes] = (x1 * s[:, None]).T @ x1 / n
        h += l2 * np.eye(h.shape[0])
        w -= np.linalg.solve(h, grad.reshape(-1)).reshape(d + 1, classes)
    return lambda xs: np.hstack([xs, np.ones((len(xs), 1))]) @ w


def wait(api, job_id):
    while True:
        status, job = api.call("GET", "/v1/jobs/" + job_id)
        if job.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return job
        time.sleep(1)


def run_table(api, name, label, train_text, test_text, spec_model, loss, epochs, batch):
    api.call("DELETE", "/v1/datasets/" + name)
    for split, text in (("train", train_text), ("test", test_text)):
        status, body = api.call("PUT", "/v1/datasets/%s/%s?label=%s" % (name, split, label), text.encode(), "text/csv")
        if status not in (200, 201):
            sys.exit("upload of %s/%s failed: %s" % (name, split, body))
    status, dataset = api.call("GET", "/v1/datasets/" + name)
    # The input width: ask with a guess and read the answer's expected width.
    spec = {"name": name, "dataset": {"name": name, "shuffle_seed": 1},
            "model": dict(spec_model, input_shape=[1], seed=1), "loss": loss,
            "optimizer": {"type": "adam", "learning_rate": 0.01},
            "training": {"mode": "sync", "global_batch_size": batch, "epochs": epochs, "workers": 2, "servers": 2}}
    status, problem = api.call("POST", "/v1/jobs", spec)
    width = int(problem["detail"].split("'s [")[1].split("]")[0])
    spec["model"]["input_shape"] = [width]
    t0 = time.time()
    status, job = api.call("POST", "/v1/jobs", spec)
    if status != 201:
        sys.exit("submit failed: %s" % job)
    job = wait(api, job["id"])
    seconds = time.time() - t0
    if job["state"] != "SUCCEEDED":
        sys.exit("job %s: %s" % (job["id"], job.get("reason")))
    status, ev = api.call("POST", "/v1/jobs/%s/evaluate" % job["id"], {})
    rows = records(test_text)[:3]
    instances = [{k: (None if v in MISSING else (float(v) if is_number(v) else v)) for k, v in r.items() if k != label} for r in rows]
    status, predicted = api.call("POST", "/v1/models/%s:predict" % job["id"], {"instances": instances})
    return job, ev, predicted, width, seconds, dataset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("PSTRAIN_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--token", default=os.environ.get("PSTRAIN_TOKEN", ""))
    ap.add_argument("--work", default="/tmp/raw-tables")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless penguins is within 2 points of the baseline and auto-mpg's MAE is at most the baseline's")
    args = ap.parse_args()
    failures = []
    os.makedirs(args.work, exist_ok=True)
    api = Api(args.url, args.token)

    # Penguins, unedited.
    text = open(package_file(args.work, *PENGUINS), encoding="utf-8").read()
    train_text, test_text = split_lines(text, SEED)
    model = {"layers": [{"type": "dense", "units": 16, "activation": "relu"}, {"type": "dense", "units": 3}]}
    job, ev, predicted, width, seconds, dataset = run_table(api, "penguins-raw", "species", train_text, test_text, model,
                                                            "sparse_softmax_cross_entropy", 60, 32)
    tr, te = records(train_text), records(test_text)
    names = sorted({r["species"] for r in tr})
    xtr, xte = default_features(tr, tr + te, "species")
    xte = xte[len(tr):]
    ytr = np.array([names.index(r["species"]) for r in tr])
    yte = np.array([names.index(r["species"]) for r in te])
    f = logistic(xtr, ytr, len(names))
    baseline = float((f(xte).argmax(1) == yte).mean())
    print("penguins: %d train / %d test rows, %d features after preprocessing; service %.4f (%.1f s), baseline %.4f"
          % (len(tr), len(te), width, ev["accuracy"], seconds, baseline))
    print("  predictions by field name:", json.dumps(predicted["predictions"][:2]))
    print("RESULT " + json.dumps({"table": "penguins", "service_accuracy": ev["accuracy"], "baseline_accuracy": baseline,
                                  "width": width, "seconds": round(seconds, 1)}))
    if ev["accuracy"] < baseline - 0.02:
        failures.append("penguins: accuracy %.4f is more than 2 points below the baseline's %.4f" % (ev["accuracy"], baseline))
    first = predicted.get("predictions", [{}])[0]
    if first.get("class") not in names or sorted(first.get("probabilities", {})) != names:
        failures.append("penguins: a prediction by field name does not name the classes: %s" % json.dumps(predicted))

    # Cars (auto-mpg) as a CSV export.
    cars = json.load(open(package_file(args.work, *CARS)))
    fields = list(cars[0].keys())
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(fields)
    for r in cars:
        if r["Miles_per_Gallon"] is None:
            continue
        w.writerow(["" if r[k] is None else r[k] for k in fields])
    train_text, test_text = split_lines(out.getvalue(), SEED)
    model = {"layers": [{"type": "dense", "units": 64, "activation": "relu"}, {"type": "dense", "units": 64, "activation": "relu"},
                        {"type": "dense", "units": 1}]}
    job, ev, predicted, width, seconds, dataset = run_table(api, "cars-raw", "Miles_per_Gallon", train_text, test_text, model,
                                                            "mean_absolute_error", 200, 32)
    tr, te = records(train_text), records(test_text)
    xtr, xall = default_features(tr, tr + te, "Miles_per_Gallon")
    xte = xall[len(tr):]
    ytr = np.array([float(r["Miles_per_Gallon"]) for r in tr])
    yte = np.array([float(r["Miles_per_Gallon"]) for r in te])
    a = np.hstack([xtr, np.ones((len(xtr), 1))])
    coef = np.linalg.lstsq(a, ytr, rcond=None)[0]
    baseline = float(np.abs(np.hstack([xte, np.ones((len(xte), 1))]) @ coef - yte).mean())
    print("cars: %d train / %d test rows, %d features after preprocessing; service test MAE %.3f (%.1f s), least squares %.3f"
          % (len(tr), len(te), width, ev["mae"], seconds, baseline))
    print("  predictions by field name:", json.dumps(predicted["predictions"][:2]))
    print("RESULT " + json.dumps({"table": "cars", "service_mae": ev["mae"], "baseline_mae": baseline, "width": width,
                                  "seconds": round(seconds, 1)}))
    if ev["mae"] > baseline:
        failures.append("auto-mpg: MAE %.3f is above the least squares baseline's %.3f" % (ev["mae"], baseline))
    if "value" not in predicted.get("predictions", [{}])[0]:
        failures.append("auto-mpg: a prediction by field name has no value: %s" % json.dumps(predicted))
    for f in failures:
        print("FAIL " + f)
    if args.check and failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
