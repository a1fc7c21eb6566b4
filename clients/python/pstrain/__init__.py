"""pstrain: the Python client of the pstrain training service (standard library only; NumPy
and pandas are used when installed).

    import pstrain
    client = pstrain.Client()                       # PSTRAIN_URL, PSTRAIN_TOKEN, PSTRAIN_CACERT
    client.datasets.upload("digits", train=(x, y), test=(x_test, y_test))
    job = client.jobs.submit(spec)                  # a dict or a JSON file
    job.follow()                                    # Keras-like progress, to the end
    job.model.predict(x_test[:5])
    job.model.download("model.onnx", format="onnx")

Every error the service answers is raised as pstrain.ApiError (status, type, title, detail,
field); an unreachable coordinator as pstrain.Unreachable (an ApiError with status 0)."""
from . import ids, text
from ._http import ApiError, Transport, Unreachable
from .datasets import Datasets
from .jobs import Job, Jobs
from .models import Model, Models
from .studies import Studies, Study

__all__ = ["Client", "ApiError", "Unreachable", "Job", "Model", "Study", "ids", "text"]
__version__ = "0.3.0"


class Client:
    """A connection to a coordinator's REST API.

    url: "http://host:port" or "https://..." (default PSTRAIN_URL, else http://127.0.0.1:8080);
    token: a bearer token (default PSTRAIN_TOKEN); cafile: the CA of an https server's
    certificate (default PSTRAIN_CACERT, else the system's); timeout: seconds per answer;
    retries: how often an idempotent call is tried again after a connection error."""

    def __init__(self, url=None, token=None, cafile=None, timeout=30.0, retries=3, insecure=False):
        self._t = Transport(url, token, cafile, timeout, retries, insecure)
        self.datasets = Datasets(self)
        self.jobs = Jobs(self)
        self.models = Models(self)
        self.studies = Studies(self)

    @property
    def url(self):
        return self._t.url

    def health(self):
        return self._t.call("GET", "/healthz")

    def cluster(self):
        """The registered nodes (GET /v1/cluster)."""
        return self._t.call("GET", "/v1/cluster")["nodes"]

    def __repr__(self):
        return f"Client({self.url!r})"
