#!/usr/bin/env bash
# The tabular reference jobs against their baselines on the same splits (docs/BENCHMARKS.md
# "Regression and binary reference jobs"): deploy/reference-tables.py makes auto-mpg and
# penguins-sex from Debian's packages and fits least squares / logistic regression; the standalone
# trainer runs deploy/jobs/auto-mpg-regression.json and penguins-sex-binary.json (a sync cluster
# computes the same parameters bit for bit, so the figures are the cluster's too).
#
# Usage: tests/bench/tabular_reference.sh [DATA_DIR]   (default: a temporary directory)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
data=${1:-$(mktemp -d)}
train="$here/build/worker/pstrain-train"
[[ -x $train ]] || { echo "build first: $train is missing" >&2; exit 1; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p')"
baselines=$(/usr/bin/python3 "$here/deploy/reference-tables.py" --data-dir "$data" --baselines 2>/dev/null)
run() {  # job file -> the trainer's final line
  "$train" --spec "$here/deploy/jobs/$1" --data-dir "$data" --threads 2 2>/dev/null | grep '^final test'
}
mpg=$(run auto-mpg-regression.json)
penguins=$(run penguins-sex-binary.json)
# The Keras regression tutorial's other run: 20% held out, early stopping on val_loss (patience
# 10, the best epoch's parameters).
early=$("$train" --spec "$here/deploy/jobs/auto-mpg-early-stopping.json" --data-dir "$data" --threads 2 2>/dev/null |
        grep -E '^(early stopping|final test)' | tr '\n' ' ')
/usr/bin/python3 - "$baselines" "$mpg" "$penguins" "$early" <<'PY'
import json, re, sys
b = json.loads(sys.argv[1])
mpg = dict(re.findall(r"(mae|rmse|r2): ([-0-9.]+)", sys.argv[2]))
acc = float(re.search(r"accuracy: ([0-9.]+)", sys.argv[3]).group(1))
ls = b["auto-mpg"]["least_squares"]
lr = b["penguins-sex"]["logistic_regression"]
print(f"| job | metric | baseline | pstrain | better |")
print(f"|---|---|---|---|---|")
for k in ("mae", "rmse"):
    print(f"| auto-mpg ({b['auto-mpg']['test']} test cars) | test {k.upper()} (mpg) | {ls[k]:.3f} (least squares) | {float(mpg[k]):.3f} | {'yes' if float(mpg[k]) < ls[k] else 'NO'} |")
print(f"| auto-mpg | test R^2 | {ls['r2']:.4f} | {float(mpg['r2']):.4f} | {'yes' if float(mpg['r2']) > ls['r2'] else 'NO'} |")
early = sys.argv[4]
stop = re.search(r"stopped after epoch (\d+), best epoch (\d+)", early)
emae = float(re.search(r"mae: ([-0-9.]+)", early).group(1))
print(f"| auto-mpg, early stopping (epoch {stop.group(2)} of {stop.group(1)} run) | test MAE (mpg) | {ls['mae']:.3f} (least squares) | {emae:.3f} | {'yes' if emae < ls['mae'] else 'NO'} |")
print(f"| penguins-sex ({b['penguins-sex']['test']} test penguins) | test accuracy | {lr['accuracy']:.4f} (logistic regression) | {acc:.4f} | {'yes' if acc > lr['accuracy'] else 'NO'} |")
PY
