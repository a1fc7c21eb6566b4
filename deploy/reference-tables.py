#!/usr/bin/python3
"""Makes the reference tabular datasets from tables Debian packages ship, as dataset directories
(docs/DATASETS.md "Dataset directories") in a data directory, and fits the baselines the
reference jobs are compared with on the same splits.

  auto-mpg      regression: miles per gallon of 392 cars (1970-82) from cylinders, displacement,
                horsepower, weight, acceleration, model year and origin (one-hot), the table of
                Keras' "Basic regression" tutorial, from python3-vega-datasets (cars.json).
  penguins-sex  binary classification: a penguin's sex (female 0, male 1) from its bill length
                and depth, flipper length, body mass, species and island (one-hot), 333 penguins,
                from r-cran-palmerpenguins (extdata/penguins.csv).

Rows with a missing value are left out (the service reads missing values only from issue 36 on).
Each table is split 80/20 with a fixed seed; features are standardized with the train split's mean
and standard deviation (the job spec has no preprocessing yet), so the baselines and the jobs see
the same numbers.

Usage: reference-tables.py --data-dir DIR [--baselines]
The packages are read where they are installed, else fetched with `apt-get download` into
DIR/.debs and unpacked there (no installation, no R).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

VEGA_CARS = "usr/lib/python3/dist-packages/vega_datasets/_data/cars.json"
PENGUINS = "usr/lib/R/site-library/palmerpenguins/extdata/penguins.csv"
SEED = 20261127


def package_file(data_dir, package, path):
    """The file from the installed package, else from its .deb unpacked under DATA_DIR/.debs."""
    if os.path.exists("/" + path):
        return "/" + path
    debs = os.path.join(data_dir, ".debs")
    unpacked = os.path.join(debs, package)
    if not os.path.exists(os.path.join(unpacked, path)):
        os.makedirs(debs, exist_ok=True)
        subprocess.run(["apt-get", "download", package], cwd=debs, check=True, stdout=subprocess.DEVNULL)
        deb = [f for f in os.listdir(debs) if f.startswith(package + "_") and f.endswith(".deb")][0]
        subprocess.run(["dpkg", "-x", os.path.join(debs, deb), unpacked], check=True)
    return os.path.join(unpacked, path)


def split_rows(n, seed):
    order = np.random.default_rng(seed).permutation(n)
    cut = int(round(n * 0.8))
    return order[:cut], order[cut:]


def one_hot(values, names):
    return np.array([[1.0 if v == name else 0.0 for name in names] for v in values])


def auto_mpg(data_dir):
    rows = json.load(open(package_file(data_dir, "python3-vega-datasets", VEGA_CARS)))
    keep = [r for r in rows if r["Miles_per_Gallon"] is not None and r["Horsepower"] is not None]
    numeric = np.array([[r["Cylinders"], r["Displacement"], r["Horsepower"], r["Weight_in_lbs"], r["Acceleration"],
                         int(r["Year"][:4])] for r in keep], dtype=np.float64)
    x = np.hstack([numeric, one_hot([r["Origin"] for r in keep], ["USA", "Europe", "Japan"])])
    y = np.array([r["Miles_per_Gallon"] for r in keep], dtype=np.float64)
    return x, y, 6  # the first 6 columns are standardized; one-hot columns stay 0/1


def penguins(data_dir):
    import csv
    rows = list(csv.DictReader(open(package_file(data_dir, "r-cran-palmerpenguins", PENGUINS))))
    fields = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    keep = [r for r in rows if r["sex"] in ("male", "female") and all(r[f] != "NA" for f in fields)]
    numeric = np.array([[float(r[f]) for f in fields] for r in keep])
    x = np.hstack([numeric, one_hot([r["species"] for r in keep], ["Adelie", "Chinstrap", "Gentoo"]),
                   one_hot([r["island"] for r in keep], ["Biscoe", "Dream", "Torgersen"])])
    y = np.array([1 if r["sex"] == "male" else 0 for r in keep])
    return x, y, 4


def standardized(x, train, columns):
    x = x.copy()
    mean = x[train, :columns].mean(axis=0)
    std = x[train, :columns].std(axis=0)
    x[:, :columns] = (x[:, :columns] - mean) / std
    return x


def write_dataset(data_dir, name, x, y, train, test, y_dtype):
    d = os.path.join(data_dir, name)
    os.makedirs(d, exist_ok=True)
    for split, rows in (("train", train), ("test", test)):
        np.save(os.path.join(d, split + "-x.npy"), x[rows].astype(np.float32))
        np.save(os.path.join(d, split + "-y.npy"), y[rows].astype(y_dtype))
    manifest = {"train": {"x": "train-x.npy", "y": "train-y.npy"}, "test": {"x": "test-x.npy", "y": "test-y.npy"},
                "source": "directory"}
    with open(os.path.join(d, "dataset.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return d


def least_squares(x, y, train, test):
    a = np.hstack([x, np.ones((len(x), 1))])
    w, *_ = np.linalg.lstsq(a[train], y[train], rcond=None)
    e = a[test] @ w - y[test]
    total = ((y[test] - y[test].mean()) ** 2).sum()
    return {"mae": float(np.abs(e).mean()), "rmse": float(np.sqrt((e ** 2).mean())),
            "r2": float(1 - (e ** 2).sum() / total)}


def logistic_regression(x, y, train, test, l2=1e-3):
    """Newton's method (IRLS) on the mean log loss + l2/2 |w|^2 (bias not penalized)."""
    a = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(a.shape[1])
    penalty = np.full(a.shape[1], l2)
    penalty[-1] = 0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(a[train] @ w)))
        grad = a[train].T @ (p - y[train]) / len(train) + penalty * w
        hess = (a[train].T * (p * (1 - p))) @ a[train] / len(train) + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    predicted = (a[test] @ w) > 0
    return {"accuracy": float((predicted == (y[test] == 1)).mean())}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--baselines", action="store_true", help="print the baselines' test figures as JSON")
    args = parser.parse_args()
    os.makedirs(args.data_dir, exist_ok=True)
    results = {}

    x, y, scaled = auto_mpg(args.data_dir)
    train, test = split_rows(len(x), SEED)
    x = standardized(x, train, scaled)
    write_dataset(args.data_dir, "auto-mpg", x, y, train, test, np.float32)
    results["auto-mpg"] = {"train": len(train), "test": len(test), "least_squares": least_squares(x, y, train, test)}

    x, y, scaled = penguins(args.data_dir)
    train, test = split_rows(len(x), SEED)
    x = standardized(x, train, scaled)
    write_dataset(args.data_dir, "penguins-sex", x, y, train, test, np.int32)
    results["penguins-sex"] = {"train": len(train), "test": len(test),
                               "logistic_regression": logistic_regression(x, y, train, test)}

    print(json.dumps(results) if args.baselines else
          "made auto-mpg and penguins-sex in " + args.data_dir, file=sys.stdout)


if __name__ == "__main__":
    main()
