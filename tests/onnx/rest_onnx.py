"""The REST side of the ONNX test (run_onnx_test.sh): against a running cluster, every softmax model
of a fixture directory (onnx_fixture) is uploaded (POST /v1/models), downloaded as ONNX
(GET /v1/models/{id}/file?format=onnx) and asked for :predict on the fixture's inputs; a short job
on mnist10k (uint8 images) is trained and its model downloaded as ONNX and asked for :predict
with raw bytes ({"b64": ...}), so the graph's 1/255 is checked too. For each, writes
<name>.rest.{onnx,input.f32,expected.f32,json} (expected: the service's probabilities) for
compare.mjs, and prints the names.

Usage: /usr/bin/python3 rest_onnx.py URL FIXTURE_DIR OUT_DIR   (PSTRAIN_TOKEN: a token)"""
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

import numpy as np

url, fixture, out = sys.argv[1:4]
token = os.environ.get("PSTRAIN_TOKEN", "")


def call(method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(url + path, data=body, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if body is not None:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=300) as r:
        return r.read()


def predict(model, instances):
    probs = []
    for start in range(0, len(instances), 500):
        body = json.dumps({"instances": instances[start:start + 500]}).encode()
        answer = json.loads(call("POST", f"/v1/models/{model}:predict", body))
        probs += [p["probabilities"] for p in answer["predictions"]]
    return np.asarray(probs, dtype=np.float32)


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
        return e.code, json.loads(e.read() or b"{}")


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
# A checkpoint exports too (the job backs up every epoch).
checkpoints = json.loads(call("GET", f"/v1/jobs/{job}/checkpoints"))
step = checkpoints["checkpoints"][-1]["step"] if isinstance(checkpoints, dict) else checkpoints[-1]["step"]
assert call("GET", f"/v1/jobs/{job}/checkpoints/{step}?format=onnx")[:2] == onnx_bytes[:2]
