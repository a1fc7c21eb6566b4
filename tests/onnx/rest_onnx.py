"""The REST side of the ONNX test (run_onnx_test.sh): against a running cluster, every softmax model
of a fixture directory (onnx_fixture) is uploaded (POST /v1/models), downloaded as ONNX
(GET /v1/models/{id}/file?format=onnx) and asked for :predict on the fixture's inputs; a short job
on mnist10k (uint8 images) is trained and its model downloaded as ONNX and asked for :predict
with raw bytes ({"b64": ...}), so the graph's 1/255 is checked too. For each, writes
<name>.rest.{onnx,input.f32,expected.f32,json} (expected: the service's probabilities) for
compare.mjs, and prints the names.

Usage: /usr/bin/python3 rest_onnx.py URL FIXTURE_DIR OUT_DIR   (PSTRAIN_TOKEN: a token)"""
import base64
import io
import json
import os
import sys
import time
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from pstrain import ids  # noqa: E402 (the fingerprints an exported graph takes for hashed columns)

url, fixture, out = sys.argv[1:4]
token = os.environ.get("PSTRAIN_TOKEN", "")


def call(method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(url + path, data=body, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if body is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        e.detail = e.read()
        print(f"{method} {path}: {e.code} {e.detail[:300]!r}", file=sys.stderr)
        raise


def wait_succeeded(job, seconds=120):
    """Polls the job until it SUCCEEDED; fails on FAILED, CANCELLED or after `seconds`."""
    deadline = time.time() + seconds
    while (status := json.loads(call("GET", f"/v1/jobs/{job}")))["state"] != "SUCCEEDED":
        assert status["state"] not in ("FAILED", "CANCELLED") and time.time() < deadline, status
        time.sleep(0.3)



def predictions(model, instances, per_call=500):
    """`:predict`'s predictions for `instances`, per_call at a time."""
    out = []
    for start in range(0, len(instances), per_call):
        body = json.dumps({"instances": instances[start:start + per_call]}).encode()
        out += json.loads(call("POST", f"/v1/models/{model}:predict", body))["predictions"]
    return out


def predict(model, instances):
    return np.asarray([p["probabilities"] for p in predictions(model, instances)], dtype=np.float32)


def write(name, onnx_bytes, inputs, expected, shape):
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(onnx_bytes)
    np.asarray(inputs, dtype=np.float32).tofile(os.path.join(out, name + ".input.f32"))
    expected.astype(np.float32).tofile(os.path.join(out, name + ".expected.f32"))
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump({"count": len(expected), "input_shape": shape, "output": "probabilities",
                   "width": int(expected.shape[1])}, f)
    print(name)


def status_of(method, path, body=None, ctype="application/json"):
    try:
        call(method, path, body, ctype)
        return 200, {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.detail or b"{}")


# Refusals: an unknown format, a model without an architecture (weights only).
header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
bare = len(header).to_bytes(8, "little") + header + b"\0\0\0\0"
bare_id = json.loads(call("POST", "/v1/models?name=bare", bare, "application/octet-stream"))["id"]
code, problem = status_of("GET", f"/v1/models/{bare_id}/file?format=onnx")
assert code == 409 and problem["type"].endswith("model-without-architecture"), (code, problem)
code, problem = status_of("GET", f"/v1/models/{bare_id}/file?format=pb")
assert code == 400 and problem.get("field") == "format", (code, problem)

names = sorted(f[:-5] for f in os.listdir(fixture) if f.endswith(".json") and not f.endswith(".rest.json"))
for name in names:
    meta = json.load(open(os.path.join(fixture, name + ".json")))
    if meta.get("loss") != "softmax":
        continue  # an uploaded model keeps its architecture, not its loss: softmax models only
    upload = json.loads(call("POST", f"/v1/models?name={name}", open(os.path.join(fixture, name + ".safetensors"), "rb").read(),
                             "application/octet-stream"))
    model = upload["id"]
    onnx_bytes = call("GET", f"/v1/models/{model}/file?format=onnx")
    raw = np.fromfile(os.path.join(fixture, name + ".input.f32"), dtype=np.float32)
    width = int(np.prod(meta["input_shape"]))
    # An uploaded model has no dataset: its inputs are what the engine sees (images: pixel / 255).
    seen = (raw * np.float32(1 / 255.0) if len(meta["input_shape"]) == 3 else raw).reshape(-1, width)
    expected = predict(model, [[float(v) for v in row] for row in seen])
    write(name + ".rest", onnx_bytes, seen, expected, meta["input_shape"])

# A trained job on uint8 images: the ONNX model takes raw pixel values.
spec = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "jobs", "mnist-mlp.json")))
spec["name"] = "onnx-mnist"
spec["training"].update({"epochs": 1, "workers": 1, "servers": 1})
job = json.loads(call("POST", "/v1/jobs", json.dumps(spec).encode()))["id"]
deadline = time.time() + 240
while True:
    state = json.loads(call("GET", f"/v1/jobs/{job}"))["state"]
    if state == "SUCCEEDED":
        break
    if state in ("FAILED", "CANCELLED") or time.time() > deadline:
        sys.exit(f"job {job} ended {state}")
    time.sleep(0.5)
onnx_bytes = call("GET", f"/v1/models/{job}/file?format=onnx")
rng = np.random.default_rng(5)
pixels = rng.integers(0, 256, size=(1000, 784), dtype=np.uint8)
expected = predict(job, [{"b64": base64.b64encode(row.tobytes()).decode()} for row in pixels])
write("mnist-mlp-trained.rest", onnx_bytes, pixels.astype(np.float32), expected, [28, 28, 1])
# One input convention (docs/REST.md): the same raw pixels as JSON numbers are the same inputs as
# the bytes, so the same probabilities to the bit; ONNX Runtime gets these arrays (compare.mjs).
assert np.array_equal(predict(job, [[int(v) for v in row] for row in pixels]), expected)
# The old form (pixel / 255) is refused, naming the instance and what to send; by name it is taken.
old_form = json.dumps({"instances": [(pixels[0] / 255.0).tolist()]}).encode()
code, problem = status_of("POST", f"/v1/models/{job}:predict", old_form)
assert code == 422 and problem.get("field") == "/instances/0" and '"input_form": "scaled"' in problem["detail"], problem
scaled = json.loads(call("POST", f"/v1/models/{job}:predict",
                         json.dumps({"instances": [(pixels[0] / 255.0).tolist()], "input_form": "scaled"}).encode()))
assert np.allclose(scaled["predictions"][0]["probabilities"], expected[0], rtol=1e-5, atol=1e-7)
# Evaluate's path: the same raw images as a dataset (stored as uint8, as an upload keeps them),
# labelled 0-9 in turn; its loss is the mean of -ln p(label) over :predict's probabilities, its
# accuracy how often :predict's class is the label.
few = pixels[:64].reshape(-1, 28, 28, 1)
labels = np.arange(64, dtype=np.int64) % 10
buffer = io.BytesIO()
np.savez(buffer, x=few, y=labels)
for split in ("train", "test"):
    call("PUT", f"/v1/datasets/raw-pixels/{split}", buffer.getvalue(), "application/x-npz")
evaluation = json.loads(call("POST", f"/v1/models/{job}:evaluate", json.dumps({"dataset": "raw-pixels"}).encode()))
want_loss = float(np.mean(-np.log(expected[np.arange(64), labels].astype(np.float64))))
want_accuracy = float(np.mean(expected[:64].argmax(axis=1) == labels))
assert evaluation["examples"] == 64 and abs(evaluation["accuracy"] - want_accuracy) < 1e-12, (evaluation, want_accuracy)
assert abs(evaluation["loss"] - want_loss) <= 1e-5 * max(1.0, want_loss), (evaluation["loss"], want_loss)
print("one input convention: b64 == numbers, old form refused, evaluate's loss", evaluation["loss"], "==", want_loss, file=sys.stderr)
# A table model (default preprocessing: standardized numbers with missing values, a boolean, a
# category one-hot with "other"), and one whose category goes as ids through a slice into an
# embedding: the raw columns fed by name, missing and unseen values included.
def loans(rows, seed):
    r = np.random.default_rng(seed)
    regions = ["north", "south", "east", "west", "islands"]
    lines = ["income,age,region,owner,decision"]
    for _ in range(rows):
        income = 15 + 5985 * r.random() * r.random()
        region = int(r.integers(0, 5))
        owner = r.random() < 0.5
        score = income / 1500 + (1.5 if region == 1 else 0) + (1 if owner else 0) - 2 + 0.5 * (r.random() - 0.5)
        lines.append(",".join(["NA" if r.random() < 0.08 else f"{income:.2f}", str(int(18 + 62 * r.random())),
                               regions[region], "" if r.random() < 0.05 else ("yes" if owner else "no"),
                               "approved" if score > 0 else "declined"]))
    return ("\n".join(lines) + "\n").encode()


call("PUT", "/v1/datasets/onnx-loans/train?label=decision", loans(400, 1), "text/csv")
call("PUT", "/v1/datasets/onnx-loans/test?label=decision", loans(100, 2), "text/csv")
table_specs = {
    "table-one-hot": ({"input_shape": [11], "seed": 2, "layers": [{"type": "dense", "units": 8, "activation": "relu"},
                                                                {"type": "dense", "units": 2}]}, None),
    "table-ids": ({"input_shape": [6], "seed": 4, "layers": [
        {"name": "region", "type": "slice", "inputs": ["input"], "begin": 3, "size": 1},
        {"name": "vectors", "type": "embedding", "inputs": ["region"], "input_dim": 6, "output_dim": 3},
        {"name": "flat", "type": "flatten", "inputs": ["vectors"]},
        {"name": "numbers", "type": "slice", "inputs": ["input"], "begin": 0, "size": 3},
        {"name": "all", "type": "concatenate", "inputs": ["flat", "numbers"]},
        {"type": "dense", "units": 2}]}, {"columns": {"region": {"encode": "ids"}}}),
}
r = np.random.default_rng(9)
records = []
for i in range(1000):
    records.append({"income": None if r.random() < 0.1 else float(np.float32(15 + 5985 * r.random())),
                    "age": float(int(18 + 62 * r.random())),
                    "region": [None, "north", "south", "east", "west", "islands", "atlantis"][int(r.integers(0, 7))],
                    "owner": [None, True, False][int(r.integers(0, 3))]})
for name, (model, preprocessing) in table_specs.items():
    spec = {"name": name, "dataset": {"name": "onnx-loans"}, "model": model,
            "optimizer": {"type": "adam", "learning_rate": 0.01}, "training": {"global_batch_size": 40, "epochs": 3}}
    if preprocessing:
        spec["preprocessing"] = preprocessing
    job = json.loads(call("POST", "/v1/jobs", json.dumps(spec).encode()))["id"]
    wait_succeeded(job)
    onnx_bytes = call("GET", f"/v1/models/{job}/file?format=onnx")
    answer = predictions(job, records)
    expected = np.asarray([[p["probabilities"]["approved"], p["probabilities"]["declined"]] for p in answer], dtype=np.float32)
    with open(os.path.join(out, name + ".rest.onnx"), "wb") as f:
        f.write(onnx_bytes)
    expected.tofile(os.path.join(out, name + ".rest.expected.f32"))
    columns = {
        "income": {"type": "float", "values": [rec["income"] for rec in records]},
        "age": {"type": "float", "values": [rec["age"] for rec in records]},
        "region": {"type": "string", "values": [rec["region"] for rec in records]},
        "owner": {"type": "float", "values": [None if rec["owner"] is None else float(rec["owner"]) for rec in records]},
    }
    with open(os.path.join(out, name + ".rest.json"), "w") as f:
        json.dump({"count": len(records), "columns": columns, "output": "probabilities", "width": 2}, f)
    print(name + ".rest")

# Ids hashed into bins and a cross (issue 51): age as an integer id, region as a string id (an
# unseen "atlantis" and missing ones included), their cross with owner; each through an
# embedding. The exported graph takes a hashed column or a cross as its fingerprint (pstrain.ids).
spec = {"name": "table-hashed", "dataset": {"name": "onnx-loans"},
        "preprocessing": {"columns": {"age": {"encode": "hash", "num_bins": 32},
                                      "region": {"encode": "hash", "num_bins": 16}},
                          "crosses": [{"columns": ["region", "owner"], "num_bins": 16}]},
        "model": {"input_shape": [7], "seed": 5, "layers": [
            {"name": "age", "type": "slice", "inputs": ["input"], "begin": 2, "size": 1},
            {"name": "age_vectors", "type": "embedding", "inputs": ["age"], "input_dim": 32, "output_dim": 2},
            {"name": "region", "type": "slice", "inputs": ["input"], "begin": 3, "size": 1},
            {"name": "region_vectors", "type": "embedding", "inputs": ["region"], "input_dim": 16, "output_dim": 3},
            {"name": "cross", "type": "slice", "inputs": ["input"], "begin": 6, "size": 1},
            {"name": "cross_vectors", "type": "embedding", "inputs": ["cross"], "input_dim": 16, "output_dim": 2},
            {"name": "income", "type": "slice", "inputs": ["input"], "begin": 0, "size": 2},
            {"name": "owner", "type": "slice", "inputs": ["input"], "begin": 4, "size": 2},
            {"name": "vectors", "type": "concatenate", "inputs": ["age_vectors", "region_vectors", "cross_vectors"]},
            {"name": "flat", "type": "flatten", "inputs": ["vectors"]},
            {"name": "all", "type": "concatenate", "inputs": ["flat", "income", "owner"]},
            {"type": "dense", "units": 2}]},
        "optimizer": {"type": "adam", "learning_rate": 0.01}, "training": {"global_batch_size": 40, "epochs": 3}}
job = json.loads(call("POST", "/v1/jobs", json.dumps(spec).encode()))["id"]
wait_succeeded(job)
answer = predictions(job, records)
with open(os.path.join(out, "table-hashed.rest.onnx"), "wb") as f:
    f.write(call("GET", f"/v1/models/{job}/file?format=onnx"))
np.asarray([[p["probabilities"]["approved"], p["probabilities"]["declined"]] for p in answer],
           dtype=np.float32).tofile(os.path.join(out, "table-hashed.rest.expected.f32"))
missing = ids.fingerprint("")
region_ids = [missing if rec["region"] is None else ids.fingerprint(rec["region"]) for rec in records]
owner_ids = [missing if rec["owner"] is None else ids.fingerprint(int(rec["owner"])) for rec in records]
columns = {
    "income": {"type": "float", "values": [rec["income"] for rec in records]},
    "age": {"type": "int64", "values": [ids.fingerprint(int(rec["age"])) for rec in records]},
    "region": {"type": "int64", "values": region_ids},
    "owner": {"type": "float", "values": [None if rec["owner"] is None else float(rec["owner"]) for rec in records]},
    "region_x_owner": {"type": "int64", "values": [ids.cross(a, b) for a, b in zip(region_ids, owner_ids)]},
}
with open(os.path.join(out, "table-hashed.rest.json"), "w") as f:
    json.dump({"count": len(records), "columns": columns, "output": "probabilities", "width": 2}, f)
print("table-hashed.rest")

# A multi-valued column (issue 51): each record's tags ("a|b|c", some empty, unseen tags in
# test) hashed into 4 places, a mean bag and a sum bag of them, with the numbers. :predict gets the
# cell's text or a list of its ids; the ONNX graph the pieces' fingerprints, -1 for unused places.
# And id columns (stored as fingerprints): a user hashed into a table, an item looked up among the
# 40 most frequent items; the graph takes each one's fingerprint (the empty string's when missing).
TAGS = [f"t{k}" for k in range(30)]


def tagged(count, seed, unseen):
    r = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        tags = [TAGS[int(k)] for k in r.integers(0, len(TAGS), size=int(r.integers(0, 6)))]
        if unseen and i % 4 == 0:
            tags.append(f"new{i}")
        x = float(r.normal())
        k = int(r.integers(0, 150))  # a user: an id column (types=user:id), some missing, unseen ones in test
        user = None if i % 9 == 0 else f"new-user{i}" if unseen and i % 5 == 0 else f"u{k}"
        m = int(r.integers(0, 80))  # an item: an id column looked up (its 40 most frequent)
        item = None if i % 11 == 0 else f"new-item{i}" if unseen and i % 7 == 0 else f"i{m}"
        score = sum(1 if int(t[1:]) % 3 == 0 else -1 for t in tags if t[1:].isdigit()) + x + (1 if k % 4 == 0 else 0)
        rows.append({"tags": "|".join(tags), "x": x, "user": user, "item": item, "label": "yes" if score > 0 else "no"})
    return rows


def tagged_csv(rows):
    return ("tags,x,user,item,label\n" +
            "".join(f"{r['tags']},{r['x']!r},{r['user'] or ''},{r['item'] or ''},{r['label']}\n" for r in rows)).encode()


call("PUT", "/v1/datasets/onnx-tags/train?label=label&types=user:id,item:id", tagged_csv(tagged(600, 7, False)), "text/csv")
call("PUT", "/v1/datasets/onnx-tags/test?label=label&types=user:id,item:id", tagged_csv(tagged(100, 8, False)), "text/csv")
# Features: the tags' 4 places, tags_missing, x, user=(hash), user_missing, item=(id), item_missing.
spec = {"name": "table-tags", "dataset": {"name": "onnx-tags"},
        "preprocessing": {"columns": {"tags": {"encode": "hash", "num_bins": 64, "separator": "|", "max_values": 4},
                                      "user": {"encode": "hash", "num_bins": 128},
                                      "item": {"encode": "ids", "max_categories": 40}}},
        "model": {"input_shape": [10], "seed": 7, "layers": [
            {"name": "tags", "type": "slice", "inputs": ["input"], "begin": 0, "size": 4},
            {"name": "tag_mean", "type": "embedding", "inputs": ["tags"], "input_dim": 64, "output_dim": 4, "combiner": "mean"},
            {"name": "tag_sum", "type": "embedding", "inputs": ["tags"], "input_dim": 64, "output_dim": 2, "combiner": "sum",
             "sparse": True},
            {"name": "rest", "type": "slice", "inputs": ["input"], "begin": 4, "size": 2},
            {"name": "user", "type": "slice", "inputs": ["input"], "begin": 6, "size": 1},
            {"name": "user_vector", "type": "embedding", "inputs": ["user"], "input_dim": 128, "output_dim": 2, "combiner": "sum",
             "sparse": True},
            {"name": "user_missing", "type": "slice", "inputs": ["input"], "begin": 7, "size": 1},
            {"name": "item", "type": "slice", "inputs": ["input"], "begin": 8, "size": 1},
            {"name": "item_vector", "type": "embedding", "inputs": ["item"], "input_dim": 41, "output_dim": 2, "combiner": "sum"},
            {"name": "item_missing", "type": "slice", "inputs": ["input"], "begin": 9, "size": 1},
            {"name": "all", "type": "concatenate",
             "inputs": ["tag_mean", "tag_sum", "rest", "user_vector", "user_missing", "item_vector", "item_missing"]},
            {"type": "dense", "units": 8, "activation": "relu"},
            {"type": "dense", "units": 2}]},
        "optimizer": {"type": "adagrad", "learning_rate": 0.1}, "training": {"global_batch_size": 40, "epochs": 3}}
job = json.loads(call("POST", "/v1/jobs", json.dumps(spec).encode()))["id"]
wait_succeeded(job)
tag_records = tagged(1000, 9, True)
instances = [{"tags": r["tags"] if i % 2 else [t for t in r["tags"].split("|") if t], "x": r["x"], "user": r["user"],
              "item": r["item"]} for i, r in enumerate(tag_records)]
answer = predictions(job, instances)
with open(os.path.join(out, "table-tags.rest.onnx"), "wb") as f:
    f.write(call("GET", f"/v1/models/{job}/file?format=onnx"))
names = sorted(answer[0]["probabilities"])
np.asarray([[p["probabilities"][n] for n in names] for p in answer],
           dtype=np.float32).tofile(os.path.join(out, "table-tags.rest.expected.f32"))


def places(cell, k=4):
    fp = [ids.fingerprint(t) for t in cell.split("|") if t][:k]
    return fp + [-1] * (k - len(fp))


columns = {
    "tags": {"type": "int64", "width": 4, "values": [places(r["tags"]) for r in tag_records]},
    "x": {"type": "float", "values": [r["x"] for r in tag_records]},
    "user": {"type": "int64", "values": [ids.fingerprint(r["user"] or "") for r in tag_records]},
    "item": {"type": "int64", "values": [ids.fingerprint(r["item"] or "") for r in tag_records]},
}
with open(os.path.join(out, "table-tags.rest.json"), "w") as f:
    json.dump({"count": len(tag_records), "columns": columns, "output": "probabilities", "width": 2}, f)
print("table-tags.rest")

# A regression table model (age from the other columns): its `values` against :predict's "value".
call("PUT", "/v1/datasets/onnx-ages/train?label=age&task=regression", loans(400, 3), "text/csv")
call("PUT", "/v1/datasets/onnx-ages/test?label=age&task=regression", loans(100, 4), "text/csv")
spec = {"name": "table-regression", "dataset": {"name": "onnx-ages"},
        "model": {"input_shape": [13], "seed": 6, "layers": [{"type": "dense", "units": 8, "activation": "tanh"},
                                                             {"type": "dense", "units": 1}]},
        "loss": "mean_squared_error", "optimizer": {"type": "adam", "learning_rate": 0.01},
        "training": {"global_batch_size": 40, "epochs": 2}}
job = json.loads(call("POST", "/v1/jobs", json.dumps(spec).encode()))["id"]
wait_succeeded(job)
ages = [{k: v for k, v in rec.items() if k != "age"} | {"decision": ["approved", "declined", None][i % 3]}
        for i, rec in enumerate(records)]
answer = predictions(job, ages)
with open(os.path.join(out, "table-regression.rest.onnx"), "wb") as f:
    f.write(call("GET", f"/v1/models/{job}/file?format=onnx"))
np.asarray([[p["value"]] for p in answer], dtype=np.float32).tofile(os.path.join(out, "table-regression.rest.expected.f32"))
columns = {
    "income": {"type": "float", "values": [rec["income"] for rec in ages]},
    "region": {"type": "string", "values": [rec["region"] for rec in ages]},
    "owner": {"type": "float", "values": [None if rec["owner"] is None else float(rec["owner"]) for rec in ages]},
    "decision": {"type": "string", "values": [rec["decision"] for rec in ages]},
}
with open(os.path.join(out, "table-regression.rest.json"), "w") as f:
    json.dump({"count": len(ages), "columns": columns, "output": "values", "width": 1}, f)
print("table-regression.rest")

# A click log as a table (issue 51): 13 numbers and 26 integer id columns whose power-law ids
# reach 10 million values (tests/bench/clicklog.py's generator), uploaded as CSV; every id column
# hashed, two crossed, a DLRM-style model (a bottom MLP, a table shared by the id columns, the
# cross's table, pairwise dots, a top MLP). :predict by field name on test rows, a third of them
# with an id no training row held, against the ONNX export fed the same rows' fingerprints.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import clicklog  # noqa: E402


def click_csv(x, y):
    head = [f"n{j}" for j in range(clicklog.NUMERIC)] + [f"c{j}" for j in range(clicklog.CATEGORICAL)] + ["click"]
    lines = [",".join(head)]
    for row, label in zip(x, y):
        numbers = [repr(float(v)) for v in row[:clicklog.NUMERIC]]
        lines.append(",".join(numbers + [str(int(v)) for v in row[clicklog.NUMERIC:]] + [str(int(label))]))
    return ("\n".join(lines) + "\n").encode()


r = np.random.default_rng(5)
cards = clicklog.cardinalities(10_000_000)
weights = r.normal(0.0, 0.3, clicklog.NUMERIC)
train_x, train_y, _ = clicklog.block(r, 5, cards, weights, -1.5, 3000)
test_x, test_y, _ = clicklog.block(r, 5, cards, weights, -1.5, 600)
call("PUT", "/v1/datasets/onnx-clicks/train?label=click", click_csv(train_x, train_y), "text/csv")
call("PUT", "/v1/datasets/onnx-clicks/test?label=click", click_csv(test_x, test_y), "text/csv")
ids_at = clicklog.NUMERIC  # features: the 13 numbers, the 26 ids' bins, the cross's bin
spec = {"name": "table-clicks", "dataset": {"name": "onnx-clicks"},
        "preprocessing": {"columns": {f"c{j}": {"encode": "hash", "num_bins": 1000} for j in range(clicklog.CATEGORICAL)},
                          "crosses": [{"columns": ["c0", "c1"], "num_bins": 100, "name": "c0_x_c1"}]},
        "model": {"input_shape": [ids_at + clicklog.CATEGORICAL + 1], "seed": 11, "layers": [
            {"name": "numbers", "type": "slice", "inputs": ["input"], "begin": 0, "size": ids_at},
            {"name": "bottom", "type": "dense", "units": 4, "activation": "relu"},
            {"name": "ids", "type": "slice", "inputs": ["input"], "begin": ids_at, "size": clicklog.CATEGORICAL},
            {"name": "id_vectors", "type": "embedding", "inputs": ["ids"], "input_dim": 1000, "output_dim": 4, "sparse": True},
            {"name": "id_flat", "type": "flatten", "inputs": ["id_vectors"]},
            {"name": "cross", "type": "slice", "inputs": ["input"], "begin": ids_at + clicklog.CATEGORICAL, "size": 1},
            {"name": "cross_vectors", "type": "embedding", "inputs": ["cross"], "input_dim": 100, "output_dim": 4},
            {"name": "dots", "type": "dot_interaction", "inputs": ["bottom", "cross_vectors"], "self_interaction": True},
            {"name": "top_in", "type": "concatenate", "inputs": ["bottom", "id_flat", "dots"]},
            {"name": "top", "type": "dense", "units": 8, "activation": "relu"},
            {"type": "dense", "units": 1}]},
        "loss": "binary_cross_entropy",
        "optimizer": {"type": "adagrad", "learning_rate": 0.05}, "training": {"global_batch_size": 100, "epochs": 2}}
job = json.loads(call("POST", "/v1/jobs", json.dumps(spec).encode()))["id"]
wait_succeeded(job)
click_records = []
for i, row in enumerate(test_x):
    record = {f"n{j}": float(row[j]) for j in range(clicklog.NUMERIC)}
    record |= {f"c{j}": int(row[ids_at + j]) for j in range(clicklog.CATEGORICAL)}
    if i % 3 == 0:
        record["c25"] = 10_000_000 + i  # beyond the column's ids: never seen in training
    click_records.append(record)
answer = predictions(job, click_records, per_call=300)
assert len(answer[0]["probabilities"]) == 2, answer[0]  # numbered classes: a list, class 0 first
with open(os.path.join(out, "table-clicks.rest.onnx"), "wb") as f:
    f.write(call("GET", f"/v1/models/{job}/file?format=onnx"))
np.asarray([p["probabilities"] for p in answer],
           dtype=np.float32).tofile(os.path.join(out, "table-clicks.rest.expected.f32"))
columns = {f"n{j}": {"type": "float", "values": [rec[f"n{j}"] for rec in click_records]} for j in range(clicklog.NUMERIC)}
columns |= {f"c{j}": {"type": "int64", "values": [ids.fingerprint(rec[f"c{j}"]) for rec in click_records]}
            for j in range(clicklog.CATEGORICAL)}
columns["c0_x_c1"] = {"type": "int64", "values": [ids.cross(ids.fingerprint(rec["c0"]), ids.fingerprint(rec["c1"]))
                                                   for rec in click_records]}
with open(os.path.join(out, "table-clicks.rest.json"), "w") as f:
    json.dump({"count": len(click_records), "columns": columns, "output": "probabilities", "width": 2}, f)
print("table-clicks.rest")

# A table's text column (issue 52): the review tokenized into 10 int ids (a masked embedding,
# mean-pooled) beside a number. :predict gets the cell's text; the ONNX graph the tokenizer's ids,
# computed by the Python client's tokenizer from the file's metadata (pstrain.tokenizer.review).
GOOD, BAD = ["great", "tasty", "friendly", "lovely", "fresh"], ["cold", "rude", "stale", "slow", "dirty"]
FILLER = ["the", "soup", "waiter", "table", "night", "food", "place", "we", "had", "a"]


def reviewed(count, seed):
    r = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        pos = bool(r.integers(0, 2))
        words = [FILLER[int(k)] for k in r.integers(0, len(FILLER), size=int(r.integers(2, 9)))]
        for _ in range(int(r.integers(1, 3))):
            words.insert(int(r.integers(0, len(words) + 1)), (GOOD if pos else BAD)[int(r.integers(0, 5))])
        text = "" if i % 13 == 0 else " ".join(words).capitalize() + ("!" if i % 3 == 0 else ".")
        rows.append({"stars": float(r.normal(3.5 if pos else 2.5, 1.0)), "review": text, "label": "pos" if pos else "neg"})
    return rows


def reviewed_csv(rows):
    return ("stars,review,label\n" + "".join(f"{r['stars']!r},\"{r['review']}\",{r['label']}\n" for r in rows)).encode()


call("PUT", "/v1/datasets/onnx-reviews/train?label=label&types=review:text", reviewed_csv(reviewed(400, 9)), "text/csv")
call("PUT", "/v1/datasets/onnx-reviews/test?label=label&types=review:text", reviewed_csv(reviewed(100, 10)), "text/csv")
spec = {"name": "table-text", "dataset": {"name": "onnx-reviews"},
        "preprocessing": {"columns": {"review": {"text": {"max_tokens": 30, "output_mode": "int", "output_sequence_length": 10}}}},
        "model": {"input_shape": [11], "seed": 3, "layers": [
            {"name": "stars", "type": "slice", "inputs": ["input"], "begin": 0, "size": 1},
            {"name": "words", "type": "slice", "inputs": ["input"], "begin": 1, "size": 10},
            {"name": "vectors", "type": "embedding", "inputs": ["words"], "input_dim": 30, "output_dim": 4, "mask_zero": True},
            {"name": "pooled", "type": "global_avgpool1d", "inputs": ["vectors"]},
            {"name": "all", "type": "concatenate", "inputs": ["stars", "pooled"]},
            {"type": "dense", "units": 2}]},
        "optimizer": {"type": "adam", "learning_rate": 0.05}, "training": {"global_batch_size": 40, "epochs": 3}}
job = json.loads(call("POST", "/v1/jobs", json.dumps(spec).encode()))["id"]
wait_succeeded(job)
review_records = reviewed(300, 11)
for i, rec in enumerate(review_records):
    rec.pop("label")
    if i % 10 == 0:
        rec["review"] += " and some words never seen in training"
answer = predictions(job, review_records)
text_onnx = call("GET", f"/v1/models/{job}/file?format=onnx")
with open(os.path.join(out, "table-text.rest.onnx"), "wb") as f:
    f.write(text_onnx)
np.asarray([[p["probabilities"]["neg"], p["probabilities"]["pos"]] if isinstance(p["probabilities"], dict) else p["probabilities"]
            for p in answer], dtype=np.float32).tofile(os.path.join(out, "table-text.rest.expected.f32"))
import onnx  # noqa: E402 (python3-onnx: the file's metadata)
from pstrain import text as tokenizers  # noqa: E402
metadata = {p.key: p.value for p in onnx.load_from_string(text_onnx).metadata_props}
tokenizer = tokenizers.Tokenizer.from_json(metadata["pstrain.tokenizer.review"])
columns = {"stars": {"type": "float", "values": [rec["stars"] for rec in review_records]},
           "review": {"type": "int64", "width": 10, "values": [[int(v) for v in tokenizer.features(rec["review"])] for rec in review_records]}}
with open(os.path.join(out, "table-text.rest.json"), "w") as f:
    json.dump({"count": len(review_records), "columns": columns, "output": "probabilities", "width": 2}, f)
print("table-text.rest")

# A checkpoint exports too (the job backs up every epoch).
checkpoints = json.loads(call("GET", f"/v1/jobs/{job}/checkpoints"))
step = checkpoints["checkpoints"][-1]["step"] if isinstance(checkpoints, dict) else checkpoints[-1]["step"]
assert call("GET", f"/v1/jobs/{job}/checkpoints/{step}?format=onnx")[:2] == onnx_bytes[:2]
