#!/usr/bin/python3
"""A job spec for the synthetic click log (clicklog.py): each of the 26 id columns through an
embedding table of its own (sized by the column's cardinality in <data>/oracle.json), the 13
numbers through a dense layer, all concatenated into an MLP with one logit (binary
cross-entropy). Prints the spec's JSON.

  /usr/bin/python3 tests/bench/clicklog_job.py --data data/clicks --dataset clicks [--dense] > clicks.json
"""
import argparse
import json
import os


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the dataset directory clicklog.py wrote")
    ap.add_argument("--dataset", default="clicks", help="its name in the data directory")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--dense", action="store_true", help="dense tables instead of sparse ones (to compare)")
    ap.add_argument("--optimizer", default="adagrad")
    ap.add_argument("--learning-rate", type=float, default=0.2)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--save-freq", type=int, default=0, help="back up every N steps (0: the default, epoch ends)")
    args = ap.parse_args()
    with open(os.path.join(args.data, "oracle.json")) as f:
        cards = json.load(f)["cardinalities"]
    layers = [{"name": "numbers", "type": "slice", "begin": 0, "size": 13, "inputs": ["input"]},
              {"name": "numbers_dense", "type": "dense", "units": 16, "activation": "relu", "inputs": ["numbers"]}]
    parts = ["numbers_dense"]
    for j, c in enumerate(cards):
        layers += [{"name": f"id{j}", "type": "slice", "begin": 13 + j, "size": 1, "inputs": ["input"]},
                   {"name": f"table{j}", "type": "embedding", "input_dim": c, "output_dim": args.dim,
                    "sparse": not args.dense, "inputs": [f"id{j}"]},
                   {"name": f"flat{j}", "type": "flatten", "inputs": [f"table{j}"]}]
        parts.append(f"flat{j}")
    layers += [{"name": "all", "type": "concatenate", "inputs": parts},
               {"name": "hidden1", "type": "dense", "units": 64, "activation": "relu", "inputs": ["all"]},
               {"name": "hidden2", "type": "dense", "units": 32, "activation": "relu", "inputs": ["hidden1"]},
               {"name": "logit", "type": "dense", "units": 1, "inputs": ["hidden2"]}]
    spec = {
        "name": f"{args.dataset}-{'dense' if args.dense else 'sparse'}-tables",
        "dataset": {"name": args.dataset, "shuffle_seed": 1},
        "model": {"input_shape": [13 + len(cards)], "seed": 1, "layers": layers},
        "loss": "binary_cross_entropy",
        "optimizer": {"type": args.optimizer, "learning_rate": args.learning_rate},
        "training": {"global_batch_size": args.batch, "epochs": args.epochs},
    }
    if args.save_freq > 0:
        spec["backup"] = {"save_freq": args.save_freq}
    print(json.dumps(spec, indent=1))


if __name__ == "__main__":
    main()
