#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/): small valid and invalid
examples of each format. The param_server seeds come from the target itself
(PSTRAIN_FUZZ_WRITE_SEEDS=fuzz/corpus/param_server build-fuzz/fuzz/fuzz_param_server).

Usage: fuzz/make_corpus.py   (from anywhere; rewrites the files it owns)"""
import glob
import io
import json
import os
import struct
import zipfile
import gzip

import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(ROOT)


def write(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- job_spec: the reference jobs, and a few invalid ones
MLP = {"name": "mlp", "dataset": {"name": "mnist10k"},
       "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 16, "activation": "relu"},
                                                  {"type": "dense", "units": 10}]},
       "optimizer": {"type": "adam", "learning_rate": 0.001},
       "training": {"global_batch_size": 32, "epochs": 1}}
for path in sorted(glob.glob(os.path.join(REPO, "deploy", "jobs", "*.json"))):
    write("job_spec", os.path.basename(path), open(path, "rb").read())
write("job_spec", "mlp.json", json.dumps(MLP))
write("job_spec", "async.json", json.dumps({**MLP, "training": {"global_batch_size": 32, "epochs": 1, "mode": "async"}}))
write("job_spec", "bad-units.json", json.dumps({**MLP, "model": {"input_shape": [784], "layers": [{"type": "dense", "units": -1}]}}))
write("job_spec", "not-json.json", '{"name": "x", "model": [')
write("job_spec", "empty.json", "{}")

# ---- rest: HTTP/1.1 requests, some pipelined
def req(method, target, body=b"", ctype="application/json", extra=""):
    if isinstance(body, str):
        body = body.encode()
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\n{extra}"
    if body or method in ("POST", "PUT"):
        head += f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body

spec = json.dumps(MLP)
write("rest", "healthz", req("GET", "/healthz"))
write("rest", "jobs", req("GET", "/v1/jobs") + req("GET", "/v1/jobs/job-1") + req("GET", "/v1/jobs/job-1/metrics"))
write("rest", "submit", req("POST", "/v1/jobs", spec) + req("GET", "/v1/jobs/job-2"))
write("rest", "submit-bad", req("POST", "/v1/jobs", '{"name": 3}'))
write("rest", "submit-text", req("POST", "/v1/jobs", spec, ctype="text/plain"))
write("rest", "cancel", req("POST", "/v1/jobs/job-1/cancel") + req("POST", "/v1/jobs/nope/cancel"))
write("rest", "metrics", req("GET", "/metrics") + req("GET", "/v1/cluster") + req("GET", "/v1/openapi.json"))
write("rest", "events", req("GET", "/v1/jobs/job-1/events", extra="Last-Event-ID: 1\r\n"))
write("rest", "checkpoints", req("GET", "/v1/jobs/job-1/checkpoints") + req("GET", "/v1/jobs/job-1/model"))
write("rest", "chunked", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(spec):x}\r\n{spec}\r\n0\r\n\r\n".encode())
write("rest", "too-long", req("POST", "/v1/jobs", "", extra="") .replace(b"Content-Length: 0", b"Content-Length: 99999999"))
write("rest", "http10", b"GET /v1/jobs?state=running HTTP/1.0\r\n\r\n")
write("rest", "bad-method", req("DELETE", "/v1/jobs/job-1") + req("PATCH", "/nope%zz"))

# ---- datasets: a format byte, then the file
def npy(arr):
    b = io.BytesIO()
    np.save(b, arr)
    return b.getvalue()

def npz(**arrays):
    b = io.BytesIO()
    np.savez(b, **arrays)
    return b.getvalue()

def idx(arr):
    arr = np.asarray(arr, dtype=np.uint8)
    return bytes([0, 0, 8, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape) + arr.tobytes()

x = (np.arange(24, dtype=np.float32) / 10).reshape(6, 4)
y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int64)
write("datasets", "csv", b"\0" + b"a,b,label\n1,2,0\n3.5,-4e3,1\r\n\n5,6,1\n")
write("datasets", "csv-bom", b"\0" + b"\xef\xbb\xbfx, label\n+1, 0\n2 ,1\n")
write("datasets", "csv-bad", b"\0" + b"a,label\n\"1\",0\nnan,1\n1,2,3\n")
write("datasets", "npy-f4", b"\1" + npy(x))
write("datasets", "npy-u1", b"\1" + npy(np.arange(12, dtype=np.uint8).reshape(3, 2, 2)))
write("datasets", "npy-i8", b"\1" + npy(y))
write("datasets", "npy-v2", b"\1" + npy(y.astype(np.int32)).replace(b"\x93NUMPY\x01\x00", b"\x93NUMPY\x02\x00", 1)[:8]
      + struct.pack("<I", struct.unpack("<H", npy(y.astype(np.int32))[8:10])[0]) + npy(y.astype(np.int32))[10:])
write("datasets", "npz", b"\2" + npz(x=x, y=y))
write("datasets", "npz-u1", b"\2" + npz(x=np.arange(48, dtype=np.uint8).reshape(3, 4, 4), y=np.array([0, 1, 1], dtype=np.uint8)))
b = io.BytesIO()
np.savez_compressed(b, x=x, y=y)
write("datasets", "npz-compressed", b"\2" + b.getvalue())
write("datasets", "npz-no-y", b"\2" + npz(x=x))
write("datasets", "idx-images", b"\3" + idx(np.arange(2 * 3 * 3).reshape(2, 3, 3)))
write("datasets", "idx-labels-gz", b"\3" + gzip.compress(idx([0, 1, 2, 1])))
labels, images = idx([0, 1, 1]), gzip.compress(idx(np.arange(3 * 2 * 2).reshape(3, 2, 2)))
write("datasets", "idx-pair", b"\4" + struct.pack("<H", len(labels)) + labels + images)
write("datasets", "idx-pair-mismatch", b"\4" + struct.pack("<H", len(labels)) + labels + idx(np.zeros((2, 2, 2))))

# ---- snapshot: key u32, version u64, iterations i64, size u64, values, slot count u32, then per
# slot: name length u32, name, values
def snapshot(key, version, iterations, values, slots):
    out = struct.pack("<IQqQ", key, version, iterations, len(values)) + struct.pack(f"<{len(values)}f", *values)
    out += struct.pack("<I", len(slots))
    for name, vals in slots:
        out += struct.pack("<I", len(name)) + name.encode() + struct.pack(f"<{len(vals)}f", *vals)
    return out

write("snapshot", "plain", snapshot(3, 7, 0, [1.0, -2.0, 3.5], []))
write("snapshot", "adam", snapshot(0, 10, 10, [0.5] * 4, [("m", [0.1] * 4), ("v", [0.01] * 4)]))
write("snapshot", "empty", snapshot(1, 0, 0, [], []))
write("snapshot", "truncated", snapshot(2, 1, 1, [1.0, 2.0], [("momentum", [0.0, 0.0])])[:-3])

# ---- safetensors: the target's layout is layers.0.kernel [3, 5] and layers.0.bias [5]; slots m, v
def safetensors(tensors, metadata=None, dtype="F32"):
    header, data = {}, b""
    for name, shape, values in tensors:
        arr = np.asarray(values, dtype={"F32": np.float32, "F64": np.float64, "F16": np.float16}[dtype]).reshape(shape)
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data

kernel = ("layers.0.kernel", (3, 5), np.linspace(-1, 1, 15))
bias = ("layers.0.bias", (5,), np.linspace(0, 1, 5))
write("safetensors", "params", safetensors([kernel, bias], {"format": "pt"}))
write("safetensors", "params-f64", safetensors([bias, kernel], dtype="F64"))
write("safetensors", "params-f16", safetensors([kernel, bias], dtype="F16"))
slots = [(f"optimizer.{s}.{n}", shape, v) for s in ("m", "v") for n, shape, v in (kernel, bias)]
write("safetensors", "checkpoint", safetensors([kernel, bias] + slots, {"optimizer_iterations": "12", "note": "a\u00e9\n"}))
write("safetensors", "wrong-shape", safetensors([("layers.0.kernel", (5, 3), np.zeros(15)), bias]))
write("safetensors", "extra-tensor", safetensors([kernel, bias, ("layers.9.kernel", (1,), [0])]))
write("safetensors", "truncated", safetensors([kernel, bias])[:-7])

# ---- archive: class folders of the image seeds, as a zip and as a tar (fixed timestamps).
import tarfile

images = {n: open(os.path.join(ROOT, "corpus", "image", n), "rb").read() for n in ("gray_4x3.png", "rgba_2x2.png", "gradient_12x8.jpg")}
folders = [("set/a/gray.png", images["gray_4x3.png"]), ("set/a/deep/x.jpg", images["gradient_12x8.jpg"]),
           ("set/b/rgba.png", images["rgba_2x2.png"]), ("set/.hidden", b"x"), ("set/readme.txt", b"hi")]
zbuf = io.BytesIO()
with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_STORED) as z:
    for name, data in folders:
        z.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
write("archive", "folders.zip", zbuf.getvalue())
# Class folders of .txt documents (one not UTF-8, so both answers are reachable).
docs = [("docs/neg/a.txt", b"Bad, bad film.\nReally."), ("docs/pos/b.txt", "Good film \u2605".encode()), ("docs/pos/c.TXT", b"")]
zbuf = io.BytesIO()
with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_STORED) as z:
    for name, data in docs + [("docs/pos/latin1.txt", b"caf\xe9")]:
        z.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
write("archive", "text-folders.zip", zbuf.getvalue())
tbuf = io.BytesIO()
with tarfile.open(fileobj=tbuf, mode="w", format=tarfile.PAX_FORMAT) as t:
    for name, data in folders + [("set/b/" + "n" * 120 + ".png", images["gray_4x3.png"])]:
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(data), 1767225600
        t.addfile(info, io.BytesIO(data))
write("archive", "folders.tar", tbuf.getvalue())


def tar_header(name, size, kind):
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mtime = size, kind, 1767225600
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def padded(b):
    return b + b"\0" * ((512 - len(b) % 512) % 512)


for i, pax in enumerate([b"6 a=b\n6 c=d\n-6 x\n", b"6 a=b\n-6 x\n"]):  # malformed record lengths
    write("archive", f"bad-pax-{i}.tar", tar_header("PaxHeader", len(pax), tarfile.XHDTYPE) + padded(pax) +
          tar_header("a/1.png", 3, tarfile.REGTYPE) + padded(b"abc") + b"\0" * 1024)
print("corpora written under", os.path.join(ROOT, "corpus"))
