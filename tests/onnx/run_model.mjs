// Runs an exported model in ONNX Runtime for Node on inputs a script prepared (text_corpora.py:
// test documents tokenized by the Python client's pstrain.text), writing one output's values.
//
// Usage: node run_model.mjs MODEL.onnx INPUT.f32 WIDTH OUTPUT_NAME OUT.f32
//   INPUT.f32: N x WIDTH little-endian float32 rows for the graph's "input"; OUT.f32: N x k.
import { readFileSync, writeFileSync } from "node:fs";
import ort from "onnxruntime-node";

const [model, input, width, outputName, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node run_model.mjs MODEL.onnx INPUT.f32 WIDTH OUTPUT_NAME OUT.f32");
  process.exit(2);
}
const bytes = readFileSync(input);
const values = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
const w = Number(width);
const session = await ort.InferenceSession.create(model);
const result = await session.run({ input: new ort.Tensor("float32", values, [values.length / w, w]) });
const y = result[outputName].data;
writeFileSync(out, Buffer.from(y.buffer, y.byteOffset, y.byteLength));
