"""Jobs: submit a spec, follow it with a progress bar (reconnecting to its event stream after a
drop without repeating a line), wait, cancel, read its metrics and checkpoints."""
import json
import os
import time

from ._http import ApiError, Unreachable, quote
from ._progress import Display, bar_text, epoch_text

FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")


def _load_spec(spec):
    if isinstance(spec, dict):
        return spec
    if isinstance(spec, (str, os.PathLike)) and os.path.exists(spec):
        with open(spec, encoding="utf-8") as f:
            return json.load(f)
    if isinstance(spec, str):
        return json.loads(spec)
    raise TypeError("a spec is a dict, a JSON text or the path of a JSON file")


class Job:
    """A job of the service (its id; every read asks the API)."""

    def __init__(self, client, job_id):
        self._client = client
        self.id = job_id

    def __repr__(self):
        return f"Job({self.id!r})"

    def status(self):
        """GET /v1/jobs/{id}: state, progress, figures, nodes, model."""
        return self._client._t.call("GET", f"/v1/jobs/{quote(self.id)}")

    def _status_once(self, state, within=5.0):
        """The status once it says `state` (GET /v1/jobs/{id} may answer from a cache up to 100 ms
        old right after the event that changed it)."""
        deadline = time.monotonic() + within
        while True:
            status = self.status()
            if status["state"] == state or time.monotonic() > deadline:
                return status
            time.sleep(0.05)

    @property
    def state(self):
        return self.status()["state"]

    def cancel(self):
        """Cancels the job (POST /v1/jobs/{id}/cancel); returns its status. A finished job: ApiError 409."""
        return self._client._t.call("POST", f"/v1/jobs/{quote(self.id)}/cancel", idempotent=True)

    def wait(self, timeout=None, poll=1.0):
        """Polls until the job ends; returns its final status. TimeoutError after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status["state"] in FINISHED:
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.id} is still {status['state']} after {timeout} s")
            time.sleep(poll)

    def metrics(self, steps=False):
        """The per-epoch figures (steps=True: each worker's step reports): a pandas DataFrame when
        pandas is installed, else a list of dicts."""
        m = self._client._t.call("GET", f"/v1/jobs/{quote(self.id)}/metrics")
        rows = m["steps"] if steps else m["epochs"]
        try:
            import pandas
        except ImportError:
            return rows
        return pandas.DataFrame(rows)

    def checkpoints(self):
        """The job's checkpoints: step, epoch, time, bytes, final, figures."""
        return self._client._t.call("GET", f"/v1/jobs/{quote(self.id)}/checkpoints")["checkpoints"]

    @property
    def model(self):
        """The trained model (the job must have SUCCEEDED)."""
        from .models import Model
        return Model(self._client, self.id)

    def follow(self, progress="auto", file=None, reconnect_for=60.0):
        """Watches the job to its end from its event stream and returns the final status.

        Prints, Keras-like, "Epoch i/n", a bar redrawn while the epoch runs (on a terminal or in a
        notebook), and the epoch's line with its losses and accuracies; then "job ID STATE".
        progress: "auto" (a notebook, a terminal, or plain lines for a file or pipe), "terminal",
        "notebook", "lines", or False (silent). A dropped stream (a coordinator restarting) is
        reopened after the last event seen, for up to `reconnect_for` seconds of failures: no
        line is printed twice and none is lost."""
        display = Display(file, None if progress is False else progress)
        status = self.status()
        epochs = status.get("epochs") or 0
        steps_per_epoch = status.get("steps_per_epoch") or 0
        last, current_epoch, epoch_start, failing_since = 0, 0, time.monotonic(), None
        path = f"/v1/jobs/{quote(self.id)}/events"
        while True:
            try:
                for event_id, kind, data in self._client._t.events(path, after=last):
                    failing_since = None
                    if event_id is not None:
                        last = event_id
                    if kind == "progress":
                        epoch = data.get("epoch", 0)
                        if epoch != current_epoch:
                            current_epoch, epoch_start = epoch, time.monotonic()
                            if not epochs or not steps_per_epoch:
                                s = self.status()
                                epochs, steps_per_epoch = s.get("epochs") or 0, s.get("steps_per_epoch") or 0
                            display.line(f"Epoch {epoch}/{epochs}")
                        total = data.get("total_steps") or 0
                        done = data.get("steps_done", 0) - (epoch - 1) * steps_per_epoch if steps_per_epoch else 0
                        display.bar(bar_text(max(0, done), steps_per_epoch or total, time.monotonic() - epoch_start,
                                             {"loss": data.get("loss"), "accuracy": data.get("accuracy")}))
                    elif kind == "epoch":
                        epoch = data.get("epoch", 0)
                        if epoch != current_epoch:  # no progress event seen for it (a short epoch)
                            display.line(f"Epoch {epoch}/{epochs}")
                            current_epoch = epoch
                        display.line(epoch_text(data, time.monotonic() - epoch_start, steps_per_epoch))
                        epoch_start = time.monotonic()
                    elif kind == "state" and data.get("state") in FINISHED:
                        reason = f" ({data['reason']})" if data.get("reason") else ""
                        display.line(f"job {self.id} {data['state']}{reason}")
                        return self._status_once(data["state"])
                # The stream ended without a final state: the server closed it (restarting).
                status = self.status()
                if status["state"] in FINISHED:
                    display.line(f"job {self.id} {status['state']}")
                    return status
            except (Unreachable, OSError, ValueError) as e:
                if isinstance(e, ApiError) and not isinstance(e, Unreachable):
                    raise
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > reconnect_for:
                    raise
            time.sleep(0.5)


class Jobs:
    def __init__(self, client):
        self._client = client

    def submit(self, spec):
        """Submits a job spec (a dict, JSON text or a file's path); returns the Job. A bad spec:
        ApiError 422 whose `field` names the field."""
        created = self._client._t.call("POST", "/v1/jobs", _load_spec(spec))
        return Job(self._client, created["id"])

    def get(self, job_id):
        job = Job(self._client, job_id)
        job.status()  # ApiError 404 for an unknown job
        return job

    def list(self):
        return self._client._t.call("GET", "/v1/jobs")["jobs"]
