#!/usr/bin/python3
"""Writes a safetensors file with NumPy alone, as a user outside pstrain would (tests of uploads).

Usage: rewrite_safetensors.py IN.safetensors OUT.safetensors DTYPE [--model FILE] [--input-dtype T] [--nan NAME]
  IN      a float32 safetensors file (a pstrain model download)
  OUT     written: the same tensors (optimizer.* dropped) converted to DTYPE (F64, F32 or F16), in
          reverse name order, with no metadata unless --model is given
  --model FILE   __metadata__ {"model": <the JSON text of FILE>} (a pstrain model spec)
  --input-dtype T  __metadata__ "input_dtype": T too (how the model's dataset stores inputs)
  --nan NAME     tensor NAME gets a NaN as its first value
"""
import json
import struct
import sys

import numpy as np


def main():
    src, dst, dtype = sys.argv[1:4]
    options = dict(zip(sys.argv[4::2], sys.argv[5::2]))
    blob = open(src, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    numpy_type = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}[dtype]
    tensors = {}
    for name, v in header.items():
        if name == "__metadata__" or name.startswith("optimizer."):
            continue
        begin, end = v["data_offsets"]
        values = np.frombuffer(blob[8 + n + begin:8 + n + end], "<f4").reshape(v["shape"]).astype(numpy_type)
        if options.get("--nan") == name:
            values = values.copy()
            values.flat[0] = np.nan
        tensors[name] = values
    out_header, data, offset = {}, b"", 0
    if "--model" in options:
        out_header["__metadata__"] = {"model": open(options["--model"]).read()}
    if "--input-dtype" in options:
        out_header.setdefault("__metadata__", {})["input_dtype"] = options["--input-dtype"]
    for name in sorted(tensors, reverse=True):
        raw = tensors[name].tobytes()
        out_header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                            "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(out_header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    main()
