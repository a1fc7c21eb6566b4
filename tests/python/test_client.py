"""The Python client (clients/python/) against a real local cluster (run_python_client_test.sh
starts one and installs the client into a virtual environment with pip --no-index): uploads, a
job followed to its end with its printed lines checked, predictions equal to the REST answer,
model files downloaded and uploaded again, problem+json errors with their field, a cancel, a
reconnect after the coordinator is killed and restarted mid-follow, a study.

Environment: PSTRAIN_URL, PSTRAIN_TOKEN, PSTRAIN_CLUSTER_DIR (the local cluster's directory)."""
import io
import json
import os
import re
import signal
import ssl
import struct
import subprocess
import tarfile
import tempfile
import threading
import time
import unittest
import urllib.request
import zipfile
import zlib

import numpy as np
import pandas as pd

import pstrain

URL = os.environ["PSTRAIN_URL"]
TOKEN = os.environ.get("PSTRAIN_TOKEN")
CLUSTER_DIR = os.environ["PSTRAIN_CLUSTER_DIR"]


def mlp(epochs, dataset="mnist10k", hidden=32, lr=0.05, name="py-mlp"):
    return {"name": name, "dataset": {"name": dataset, "shuffle_seed": 1},
            "model": {"input_shape": [28, 28, 1], "seed": 3, "layers": [
                {"type": "flatten"}, {"type": "dense", "units": hidden, "activation": "relu"}, {"type": "dense", "units": 10}]},
            "optimizer": {"type": "sgd", "learning_rate": lr, "momentum": 0.9},
            "training": {"mode": "sync", "global_batch_size": 200, "epochs": epochs, "workers": 2, "servers": 2}}


def rest(method, path, payload):
    """The REST API by hand (no client), for comparisons."""
    headers = {"Content-Type": "application/json"}
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    req = urllib.request.Request(URL + path, data=json.dumps(payload).encode(), headers=headers, method=method)
    context = ssl.create_default_context(cafile=os.environ.get("PSTRAIN_CACERT")) if URL.startswith("https") else None
    with urllib.request.urlopen(req, context=context) as r:
        return json.loads(r.read())


def restart_coordinator():
    """kill -9 of the local cluster's coordinator, then the same command line again."""
    pid_file = os.path.join(CLUSTER_DIR, "coordinator.pid")
    with open(pid_file) as f:
        pid = int(f.read())
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    argv = read(f"/proc/{pid}/cmdline").split(b"\0")[:-1]
    env = dict(e.split(b"=", 1) for e in read(f"/proc/{pid}/environ").split(b"\0") if b"=" in e)
    os.kill(pid, signal.SIGKILL)
    while True:
        try:
            if read(f"/proc/{pid}/stat").split()[2] == b"Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    with open(os.path.join(CLUSTER_DIR, "coordinator.log"), "ab") as log:
        p = subprocess.Popen(argv, cwd=CLUSTER_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    with open(pid_file, "w") as f:
        f.write(str(p.pid))
    client = pstrain.Client(URL, TOKEN, retries=0)  # PSTRAIN_CACERT from the environment
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.health()
            return
        except pstrain.ApiError:
            time.sleep(0.2)
    raise AssertionError("the coordinator did not come back")


class IdsTest(unittest.TestCase):
    """pstrain.ids: the service's fingerprints (the same known answers as
    tests/common/data/id_hash_test.cc pins for the C++ side)."""

    def test_known_answers(self):
        ids = pstrain.ids
        self.assertEqual(ids.fingerprint(""), 269561105066421)
        self.assertEqual(ids.fingerprint("user-42"), 134233145272651)
        self.assertEqual(ids.fingerprint("h\u00e9llo"), 27364960676977)
        self.assertEqual(ids.fingerprint(b"42"), ids.fingerprint("42"))
        self.assertEqual(ids.fingerprint(0), 248629889170205)
        self.assertEqual(ids.fingerprint(-1), 251622562667365)
        self.assertEqual(ids.fingerprint(2**63 - 1), 46625482681859)
        a, b = ids.fingerprint("a"), ids.fingerprint(42)
        self.assertEqual(ids.cross(a, b), 276028393608756)
        self.assertEqual(ids.cross(a, b, ids.fingerprint("z")), 25890299812069)
        self.assertEqual(ids.bin(a, 1000), 36)
        with self.assertRaises(ValueError):
            ids.fingerprint(2**63)
        with self.assertRaises(TypeError):
            ids.fingerprint(True)


class TextTest(unittest.TestCase):
    """pstrain.text: the service's tokenizer (the same cases as tests/common/data/tokenizer_test.cc)."""

    def test_tokens_and_features(self):
        text = pstrain.text
        self.assertEqual(text.tokens("Hello, World!\t It's  a TEST.\n"), ["hello", "world", "its", "a", "test"])
        self.assertEqual(text.tokens("\u00dcn\u00efcode stays; C++ & e-mail"), ["\u00dcn\u00efcode", "stays", "c", "email"])
        self.assertEqual(text.tokens("Hi, there", "lower"), ["hi,", "there"])
        self.assertEqual(text.tokens("a b c d", ngrams=3), ["a", "b", "c", "d", "a b", "b c", "c d", "a b c", "b c d"])
        fitted = {"spec": {"standardize": "lower_and_strip_punctuation", "ngrams": 1, "max_tokens": 5,
                           "output_mode": "int", "output_sequence_length": 4}, "vocabulary": ["the", "sat", "cat"]}
        t = text.Tokenizer.from_json(json.dumps(fitted))
        self.assertEqual(t.features("The dog sat"), [2, 1, 3, 0])
        self.assertEqual(t.features("cat cat cat cat cat the"), [4, 4, 4, 4])
        the, two = text.idf(3, 3), text.idf(3, 2)
        unk = (the + 2 * two) / 3
        t = text.Tokenizer({"output_mode": "tf_idf", "max_tokens": 4}, ["the", "sat", "cat"], [unk, the, two, two])
        self.assertEqual(t.features("the the dog"), [unk, 2 * the, 0, 0])
        t = text.Tokenizer({"output_mode": "count", "max_tokens": 5}, ["the", "sat", "cat", "dog"])
        self.assertEqual(t.features("the the dog cat"), [0, 2, 0, 1, 1])


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = pstrain.Client(URL, TOKEN)
        cls.tmp = tempfile.TemporaryDirectory()

    def test_upload_csv_arrays_and_dataframe(self):
        c = self.client
        csv = os.path.join(self.tmp.name, "loans.csv")
        with open(csv, "w") as f:
            f.write("income,plan,age,paid\n")
            for i in range(60):
                f.write(f"{1000 + 37 * i},{['basic', 'pro', 'family'][i % 3]},{'' if i % 7 == 0 else 20 + i % 40},"
                        f"{'yes' if i % 4 else 'no'}\n")
        record = c.datasets.upload("py-loans", train=csv, label="paid", replace=True)
        self.assertEqual(record["splits"]["train"]["examples"], 60)
        columns = {col["name"]: col for col in c.datasets.get("py-loans")["splits"]["train"]["table"]["columns"]}
        self.assertEqual(columns["age"]["missing"], 9)
        self.assertEqual(columns["plan"]["type"], "categorical")
        # NumPy arrays, both splits.
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(80, 6)).astype(np.float32), rng.integers(0, 3, 80)
        record = c.datasets.upload("py-arrays", train=(x, y), test=(x[:20], y[:20]), replace=True)
        self.assertEqual(record["splits"]["train"]["examples"], 80)
        self.assertEqual(record["splits"]["test"]["examples"], 20)
        self.assertEqual(record["input_shape"], [6])
        # A DataFrame with its label column named.
        df = pd.DataFrame({"a": np.arange(30, dtype=float), "b": ["x", "y", "z"] * 10, "label": ["p", "q"] * 15})
        record = c.datasets.upload("py-frame", train=df, label="label", replace=True)
        self.assertEqual(record["splits"]["train"]["examples"], 30)
        self.assertIn("py-frame", [d["name"] for d in c.datasets.list()])
        c.datasets.delete("py-frame")
        with self.assertRaises(pstrain.ApiError) as e:
            c.datasets.get("py-frame")
        self.assertEqual(e.exception.status, 404)

    def test_upload_class_folders_of_images(self):
        def png(pixels):  # an 8-bit grayscale PNG, written by hand (zlib only)
            h, w = pixels.shape
            raw = b"".join(b"\0" + pixels[r].tobytes() for r in range(h))
            chunk = lambda kind, data: (struct.pack(">I", len(data)) + kind + data +
                                        struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
            return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
                    chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
        rng = np.random.default_rng(1)
        path = os.path.join(self.tmp.name, "shapes.zip")
        with zipfile.ZipFile(path, "w") as z:
            for cls in ("round", "square", "line"):
                for i in range(4):
                    z.writestr(f"shapes/{cls}/{i}.png", png(rng.integers(0, 255, (6, 5), dtype=np.uint8)))
        record = self.client.datasets.upload("py-shapes", train=path, image_size=(4, 4), color_mode="grayscale",
                                             replace=True)
        self.assertEqual(record["input_shape"], [4, 4, 1])
        self.assertEqual(record["class_names"], ["line", "round", "square"])
        self.assertEqual(record["splits"]["train"]["class_counts"], [4, 4, 4])
        # A file that is not an image: a 422 naming it.
        bad = os.path.join(self.tmp.name, "bad.tar")
        with tarfile.open(bad, "w") as t:
            for name, data in (("a/1.png", png(np.zeros((4, 4), np.uint8))), ("b/notes.txt", b"hello")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        with self.assertRaises(pstrain.ApiError) as e:
            self.client.datasets.upload("py-bad-images", train=bad)
        self.assertEqual(e.exception.status, 422)
        self.assertIn("b/notes.txt", str(e.exception))

    def test_submit_follow_predict_download(self):
        c = self.client
        job = c.jobs.submit(mlp(2))
        out = io.StringIO()
        final = job.follow(progress="lines", file=out)
        text = out.getvalue()
        self.assertEqual(final["state"], "SUCCEEDED")
        lines = text.splitlines()
        self.assertEqual(lines.count("Epoch 1/2"), 1, text)
        self.assertEqual(lines.count("Epoch 2/2"), 1, text)
        epoch_lines = [l for l in lines if re.fullmatch(
            r"([0-9]+)/\1 - [0-9.]+s - loss: [0-9.]+ - accuracy: [0-9.]+ - test_loss: [0-9.]+ - test_accuracy: [0-9.]+", l)]
        self.assertEqual(len(epoch_lines), 2, text)
        self.assertEqual(lines[-1], f"job {job.id} SUCCEEDED")
        self.assertNotIn("\r", text)  # no bar in a file
        # The epochs' figures as a DataFrame; checkpoints.
        m = job.metrics()
        self.assertEqual(list(m["epoch"]), [1, 2])
        self.assertAlmostEqual(float(m["test_accuracy"].iloc[-1]), final["test_accuracy"], places=12)
        self.assertTrue(job.checkpoints()[-1]["final"])
        # Predictions equal the REST answer: uint8 images go as raw bytes, floats as numbers.
        rng = np.random.default_rng(1)
        images = rng.integers(0, 256, size=(1500, 28, 28, 1), dtype=np.uint8)
        model = c.models.get(job.id)
        got = model.predict(images)  # two batches
        import base64
        want = rest("POST", f"/v1/models/{job.id}:predict",
                    {"instances": [{"b64": base64.b64encode(i.tobytes()).decode()} for i in images[:1024]]})["predictions"]
        want += rest("POST", f"/v1/models/{job.id}:predict",
                     {"instances": [{"b64": base64.b64encode(i.tobytes()).decode()} for i in images[1024:]]})["predictions"]
        self.assertEqual(got, want)
        # One input convention: the same raw pixels as numbers give the same answer as the bytes.
        self.assertEqual(model.predict(images[:50].astype(np.float32)), model.predict(images[:50]))
        # The old form (pixel / 255) is refused, naming the instance and what to send ...
        floats = (images[:10] / 255.0).astype(np.float32)
        with self.assertRaises(pstrain.ApiError) as e:
            model.predict(floats)
        self.assertEqual((e.exception.status, e.exception.field), (422, "/instances/0"))
        self.assertIn('"input_form": "scaled"', e.exception.detail)
        # ... and taken when asked for by name.
        self.assertEqual(model.predict_classes(floats, scaled=True), [p["class"] for p in want[:10]])
        self.assertEqual(model.predict_proba(images[:3]).shape, (3, 10))
        ev = model.evaluate()
        self.assertAlmostEqual(ev["accuracy"], final["test_accuracy"], places=12)
        # Files: safetensors uploaded again predicts the same; ONNX is an ONNX protobuf.
        st = model.download(os.path.join(self.tmp.name, "m.safetensors"))
        onnx = model.download(os.path.join(self.tmp.name, "m.onnx"), format="onnx")
        self.assertGreater(os.path.getsize(st), 8)
        with open(onnx, "rb") as f:
            self.assertIn(b"pstrain", f.read(4096))
        again = c.models.upload(st, name="py-again")
        self.assertTrue(again.id.startswith("model-"))
        # The same request to both (a batch of 50: a product's rounding may depend on the batch's
        # width, so the job's answers from batches of 1,024 are not the reference here).
        self.assertEqual(again.predict(images[:50]), model.predict(images[:50]))

    def test_errors_are_api_errors_with_their_field(self):
        spec = mlp(1)
        spec["optimizer"]["learning_rate"] = -1
        with self.assertRaises(pstrain.ApiError) as e:
            self.client.jobs.submit(spec)
        self.assertEqual(e.exception.status, 422)
        self.assertEqual(e.exception.field, "/optimizer/learning_rate")
        self.assertEqual(e.exception.type, "urn:pstrain:problem:invalid-spec")
        self.assertIn("learning_rate", e.exception.detail)
        with self.assertRaises(pstrain.ApiError) as e:
            self.client.jobs.get("job-999999")
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(pstrain.Unreachable):
            pstrain.Client("http://127.0.0.1:1", retries=1).jobs.list()
        # HTTPS: the cluster's certificate is trusted through the CA file (PSTRAIN_CACERT), and
        # refused without it (a self-signed certificate the system's CAs do not know).
        self.assertTrue(URL.startswith("https://"))
        self.assertEqual(pstrain.Client(URL, TOKEN, cafile=os.environ["PSTRAIN_CACERT"]).health(), {"status": "ok"})
        saved = os.environ.pop("PSTRAIN_CACERT")
        try:
            with self.assertRaises(pstrain.Unreachable) as e:
                pstrain.Client(URL, TOKEN, retries=0).health()
            self.assertIn("CERTIFICATE_VERIFY_FAILED", e.exception.detail)
        finally:
            os.environ["PSTRAIN_CACERT"] = saved

    def test_cancel(self):
        job = self.client.jobs.submit(mlp(200, name="py-cancel"))
        deadline = time.monotonic() + 60
        while job.state != "RUNNING":
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        self.assertEqual(job.cancel()["state"], "CANCELLED")
        self.assertEqual(job.wait(timeout=10)["state"], "CANCELLED")
        with self.assertRaises(pstrain.ApiError) as e:
            job.cancel()
        self.assertEqual(e.exception.status, 409)

    def test_follow_reconnects_after_a_coordinator_restart(self):
        job = self.client.jobs.submit(mlp(8, hidden=128, name="py-restart"))
        out = io.StringIO()
        result = {}
        follower = threading.Thread(target=lambda: result.setdefault("final", job.follow(progress="lines", file=out)))
        follower.start()
        deadline = time.monotonic() + 120
        while "Epoch 3/8" not in out.getvalue():
            self.assertLess(time.monotonic(), deadline, out.getvalue())
            time.sleep(0.05)
        restart_coordinator()
        follower.join(180)
        self.assertFalse(follower.is_alive())
        text = out.getvalue()
        self.assertEqual(result["final"]["state"], "SUCCEEDED", text)
        lines = text.splitlines()
        for epoch in range(1, 9):
            self.assertEqual(lines.count(f"Epoch {epoch}/8"), 1, text)
        # An epoch line per epoch; the one a restart cut may lack its training figures (they went
        # with the old coordinator), never its test figures.
        epoch_lines = [l for l in lines if re.match(r"([0-9]+)/\1 - [0-9.]+s - ", l)]
        self.assertEqual(len(epoch_lines), 8, text)
        self.assertTrue(all(re.search(r"test_loss: [0-9.]+ - test_accuracy: [0-9.]+$", l) for l in epoch_lines), text)
        self.assertNotIn("loss: 0.0000", text)
        self.assertEqual(lines[-1], f"job {job.id} SUCCEEDED")
        self.assertIn("re-queued after a coordinator restart", job.status()["notes"])

    def test_study(self):
        study = self.client.studies.submit({
            "name": "py-study", "spec": mlp(1, name="py-trial"), "algorithm": "grid", "metric": "test_accuracy",
            "search_space": {"/optimizer/learning_rate": {"choice": [0.01, 0.1]}}})
        out = io.StringIO()
        final = study.follow(file=out, poll=0.3)
        self.assertEqual(final["state"], "SUCCEEDED", out.getvalue())
        self.assertEqual(len(final["trials"]), 2)
        self.assertIn(f"study {study.id} SUCCEEDED; best trial", out.getvalue())
        best = study.best_model()
        self.assertEqual(len(best.predict(np.zeros((2, 28, 28, 1), dtype=np.uint8))), 2)


if __name__ == "__main__":
    unittest.main()
