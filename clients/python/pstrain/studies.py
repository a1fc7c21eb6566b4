"""Studies: submit a hyperparameter search, follow its trials, take its best model."""
import time

from ._http import quote
from .jobs import _load_spec


class Study:
    def __init__(self, client, study_id):
        self._client = client
        self.id = study_id

    def __repr__(self):
        return f"Study({self.id!r})"

    def status(self):
        return self._client._t.call("GET", f"/v1/studies/{quote(self.id)}")

    def cancel(self):
        return self._client._t.call("POST", f"/v1/studies/{quote(self.id)}/cancel", idempotent=True)

    def follow(self, file=None, poll=1.0):
        """Prints a line whenever a trial changes (state, epochs, metric), then the best trial;
        returns the final study."""
        import sys
        out = file or sys.stdout
        seen = {}
        while True:
            s = self.status()
            for t in s["trials"]:
                metric = "" if t["metric"] is None else f"  {s['metric']} {t['metric']:.4f}"
                params = " ".join(f"{k.rsplit('/', 1)[-1]}={v}" for k, v in t["parameters"].items())
                line = f"trial {t['number']}  {t['state']}  epochs {len(t['history'])}/{t['epochs']}{metric}  {params}"
                if seen.get(t["number"]) != line:
                    out.write(line + "\n")
                    seen[t["number"]] = line
            if s["state"] != "RUNNING":
                best = s.get("best")
                out.write(f"study {self.id} {s['state']}" +
                          (f"; best trial {best['trial']}: {s['metric']} {best['metric']:.4f}" if best else "") + "\n")
                out.flush()
                return s
            out.flush()
            time.sleep(poll)

    def wait(self, timeout=None, poll=1.0):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            s = self.status()
            if s["state"] != "RUNNING":
                return s
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"study {self.id} is still running after {timeout} s")
            time.sleep(poll)

    def best(self):
        """The best trial (trial, job, model, metric, epochs, parameters), or None."""
        return self.status().get("best")

    def best_model(self):
        from .models import Model
        best = self.best()
        return None if best is None else Model(self._client, best["model"])


class Studies:
    def __init__(self, client):
        self._client = client

    def submit(self, study):
        """Submits a study (a dict, JSON text or a file's path: spec, search_space, algorithm,
        metric, ...); returns the Study."""
        return Study(self._client, self._client._t.call("POST", "/v1/studies", _load_spec(study))["id"])

    def get(self, study_id):
        study = Study(self._client, study_id)
        study.status()
        return study

    def list(self):
        return self._client._t.call("GET", "/v1/studies")["studies"]
