"""Models: a finished job's or an uploaded one; predictions (arrays, lists or records by field
name, batched to the service's limits), evaluations, downloads as safetensors or ONNX, uploads."""
import base64
import os
import shutil

from ._http import query, quote

BATCH = 1024  # instances per :predict request (the service takes up to 4096 and 64 MiB)


def _instances(x):
    """The REST instances of x: a NumPy array (uint8 rows as {"b64"}: the raw bytes, as the
    dataset stored them), a DataFrame (records by field name), or a list as is."""
    if hasattr(x, "to_dict") and hasattr(x, "columns"):  # a DataFrame
        import math
        rows = x.to_dict("records")
        return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
    if hasattr(x, "dtype") and hasattr(x, "tolist"):
        if str(x.dtype) == "uint8":
            return [{"b64": base64.b64encode(row.tobytes()).decode()} for row in x]
        return x.tolist()
    return list(x)


class Model:
    def __init__(self, client, model_id):
        self._client = client
        self.id = model_id

    def __repr__(self):
        return f"Model({self.id!r})"

    def info(self):
        return self._client._t.call("GET", f"/v1/models/{quote(self.id)}")

    def predict(self, x, batch_size=BATCH, scaled=False):
        """The service's predictions for x (a NumPy array of examples, a list of examples, a list
        of records or a DataFrame for a table model), as :predict answers them: a list of
        {"class", "probabilities"} (or {"values"} / {"value"} for regression), in order.

        Examples go as their dataset stores them (the service's one input convention): for a
        uint8 image dataset the raw pixel values 0-255 (a uint8 array is sent as raw bytes, any
        other array as numbers); the model scales them itself. Values already scaled as the model
        sees them (pixel / 255) need scaled=True; sent without it they are refused (ApiError 422
        naming the instance)."""
        instances = _instances(x)
        out = []
        for start in range(0, len(instances), batch_size):
            body = {"instances": instances[start:start + batch_size]}
            if scaled:
                body["input_form"] = "scaled"
            answer = self._client._t.call("POST", f"/v1/models/{quote(self.id)}:predict", body, idempotent=True)
            out.extend(answer["predictions"])
        return out

    def predict_proba(self, x, batch_size=BATCH, scaled=False):
        """Class probabilities: a NumPy array (n, classes) when NumPy is installed, else lists."""
        rows = []
        for p in self.predict(x, batch_size, scaled):
            probs = p["probabilities"]
            rows.append(list(probs.values()) if isinstance(probs, dict) else probs)
        try:
            import numpy
            return numpy.asarray(rows, dtype=numpy.float64)
        except ImportError:
            return rows

    def predict_classes(self, x, batch_size=BATCH, scaled=False):
        return [p["class"] for p in self.predict(x, batch_size, scaled)]

    def evaluate(self, dataset=None, split="test"):
        """Loss, accuracy (or MAE, RMSE, R^2), per-class accuracy and the confusion matrix on a
        dataset's split (default: the dataset it was trained on)."""
        body = {"split": split}
        if dataset is not None:
            body["dataset"] = dataset
        return self._client._t.call("POST", f"/v1/models/{quote(self.id)}:evaluate", body, idempotent=True,
                                    timeout=max(self._client._t.timeout, 600))

    def download(self, path, format="safetensors"):
        """Writes the model's file to `path` (format "safetensors" or "onnx"), streamed; returns the path."""
        if format not in ("safetensors", "onnx"):
            raise ValueError('format is "safetensors" or "onnx"')
        target = f"/v1/models/{quote(self.id)}/file" + query(format="onnx" if format == "onnx" else None)
        tmp = os.fspath(path) + ".part"
        with self._client._t.open("GET", target, timeout=max(self._client._t.timeout, 600)) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f, 1 << 20)
        os.replace(tmp, path)
        return path


class Models:
    def __init__(self, client):
        self._client = client

    def get(self, model_id):
        model = Model(self._client, model_id)
        model.info()  # ApiError 404 for an unknown model
        return model

    def list(self):
        return self._client._t.call("GET", "/v1/models")["models"]

    def upload(self, path, name=None):
        """Uploads a safetensors file (POST /v1/models); returns the Model (an id "model-N")."""
        with open(path, "rb") as f, self._client._t.open(
                "POST", "/v1/models" + query(name=name), f, "application/octet-stream",
                headers={"Content-Length": str(os.path.getsize(path))}) as r:
            import json
            return Model(self._client, json.loads(r.read())["id"])
