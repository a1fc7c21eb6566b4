// Runs each exported model of a fixture directory (tests/onnx/onnx_fixture.cc) in ONNX Runtime
// for Node and compares its probabilities (or values) with the engine's: the largest difference
// must be at most 1e-5 (values: 1e-5 of max(1, |value|)). Prints one line per model with the
// runtime's session load time; exits 1 on any difference or error.
//
// Usage: node compare.mjs FIXTURE_DIR NAME...
import fs from "node:fs";
import path from "node:path";
import ort from "onnxruntime-node";

const [dir, ...names] = process.argv.slice(2);
let failed = false;
for (const name of names) {
  const meta = JSON.parse(fs.readFileSync(path.join(dir, `${name}.json`), "utf8"));
  const floats = (file) => {
    const b = fs.readFileSync(path.join(dir, file));
    return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  };
  const expected = floats(`${name}.expected.f32`);
  const started = performance.now();
  const session = await ort.InferenceSession.create(path.join(dir, `${name}.onnx`));
  const loadMs = performance.now() - started;
  const feeds = {};
  if (meta.columns) {
    // A table model: one [N, 1] input per column, strings for categories, NaN for a missing number,
    // int64 fingerprints for hashed columns and crosses (below 2^48: exact as JSON numbers); a
    // multi-valued column's values are rows of `width` fingerprints (-1: unused places).
    for (const [column, spec] of Object.entries(meta.columns)) {
      feeds[column] = spec.type === "string"
        ? new ort.Tensor("string", spec.values.map((v) => v ?? ""), [meta.count, 1])
        : spec.type === "int64"
          ? new ort.Tensor("int64", BigInt64Array.from(spec.values.flat(), (v) => BigInt(v)), [meta.count, spec.width ?? 1])
          : new ort.Tensor("float32", Float32Array.from(spec.values, (v) => v ?? NaN), [meta.count, 1]);
    }
  } else {
    feeds.input = new ort.Tensor("float32", floats(`${name}.input.f32`), [meta.count, ...meta.input_shape]);
  }
  const result = await session.run(feeds);
  const got = result[meta.output].data;
  let worst = 0, at = -1;
  if (got.length !== expected.length) {
    console.log(`${name}: ${meta.output} has ${got.length} values, the engine ${expected.length}`);
    failed = true;
    continue;
  }
  for (let i = 0; i < got.length; i++) {
    const tolerance = meta.output === "values" ? Math.max(1, Math.abs(expected[i])) : 1;
    const d = Math.abs(got[i] - expected[i]) / tolerance;
    if (!(d <= worst)) { worst = d; at = i; }
  }
  const ok = worst <= 1e-5;
  failed ||= !ok;
  console.log(`${name}: ${meta.count} instances, ${meta.output} max difference ${worst.toExponential(2)}` +
              `${ok ? "" : ` at ${at} (runtime ${got[at]}, engine ${expected[at]})`}; session load ${loadMs.toFixed(1)} ms` +
              `${ok ? "" : "  FAILED"}`);
}
process.exit(failed ? 1 : 0);
