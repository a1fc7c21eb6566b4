"""Datasets: upload splits from files, NumPy arrays or pandas DataFrames; list, read (with each
table's profile), split, delete."""
import io
import os

from ._http import query, quote

_TYPES = {".csv": "text/csv", ".jsonl": "application/x-ndjson", ".ndjson": "application/x-ndjson",
          ".npz": "application/x-npz", ".zip": "application/zip", ".tar": "application/x-tar"}


def _body(data, label):
    """(bytes or a file object, content type, label) for one split."""
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        ext = os.path.splitext(path)[1].lower()
        if ext not in _TYPES:
            raise ValueError(f"{path}: a split file is .csv, .jsonl, .ndjson, .npz, or a .zip or .tar of class folders")
        return open(path, "rb"), _TYPES[ext], label
    if hasattr(data, "to_csv") and hasattr(data, "columns"):  # a pandas DataFrame
        if label is None or label not in data.columns:
            raise ValueError("a DataFrame needs label= naming its label column")
        return data.to_csv(index=False).encode(), "text/csv", label
    if isinstance(data, tuple) and len(data) == 2:  # (x, y) arrays
        import numpy
        x, y = numpy.asarray(data[0]), numpy.asarray(data[1])
        if x.dtype not in (numpy.uint8, numpy.float32):
            x = x.astype(numpy.float32)
        if numpy.issubdtype(y.dtype, numpy.integer):
            y = y.astype(numpy.int64)
        elif y.dtype != numpy.float32:
            y = y.astype(numpy.float32)  # regression targets
        buffer = io.BytesIO()
        numpy.savez(buffer, x=x, y=y)
        return buffer.getvalue(), "application/x-npz", None
    raise TypeError("a split is a file path, an (x, y) pair of arrays or a pandas DataFrame")


class Datasets:
    def __init__(self, client):
        self._client = client

    def upload(self, name, train=None, test=None, label=None, replace=False, task=None, image_size=None,
               color_mode=None):
        """Uploads the train and/or test split of dataset `name`: each a file (.csv, .jsonl, .npz,
        or a .zip or .tar of class folders of PNG or JPEG images, resized to image_size=(height,
        width) when given, decoded as color_mode "grayscale", "rgb" (the default) or "rgba"),
        an (x, y) pair of NumPy arrays, or a pandas DataFrame with its label column named by
        `label` (also the CSV's label column; default "label"). task="regression" reads a CSV's
        whole-number label as targets. Returns the dataset's record."""
        if train is None and test is None:
            raise ValueError("give train=, test= or both")
        record = None
        for split, data in (("train", train), ("test", test)):
            if data is None:
                continue
            body, content_type, split_label = _body(data, label)
            path = f"/v1/datasets/{quote(name)}/{split}" + query(
                label=split_label, replace=replace or None, task=task,
                image_size=f"{image_size[0]},{image_size[1]}" if image_size else None, color_mode=color_mode)
            try:
                with self._client._t.open("PUT", path, body, content_type, timeout=max(self._client._t.timeout, 600)) as r:
                    r.read()
            finally:
                if hasattr(body, "close"):
                    body.close()
            record = self.get(name)
        return record

    def list(self):
        return self._client._t.call("GET", "/v1/datasets")["datasets"]

    def get(self, name):
        """The dataset's record: shape, dtype, classes, counts, sha256, and each table split's
        profile (per column: type, missing, min/max/mean/std or most frequent values)."""
        return self._client._t.call("GET", f"/v1/datasets/{quote(name)}")

    def split(self, name, test_fraction=0.1, seed=0):
        """Cuts a test split off the train split (POST /v1/datasets/{name}/split): stratified by class; a regression dataset's at random (seeded)."""
        return self._client._t.call("POST", f"/v1/datasets/{quote(name)}/split",
                                    {"test_fraction": test_fraction, "seed": seed})

    def delete(self, name):
        with self._client._t.open("DELETE", f"/v1/datasets/{quote(name)}") as r:
            r.read()
