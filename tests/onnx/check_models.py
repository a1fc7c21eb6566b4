"""Checks ONNX files with python3-onnx's checker (full_check: shapes inferred through the graph too).
Usage: /usr/bin/python3 check_models.py FILE.onnx..."""
import sys

import onnx

for path in sys.argv[1:]:
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    print(f"{path}: checker ok (opset {model.opset_import[0].version}, {len(model.graph.node)} nodes)")
