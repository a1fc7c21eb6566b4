"""The client's one way to the REST API: urllib with TLS (a CA file), a bearer token, timeouts,
retries of idempotent calls on connection errors, problem+json errors as ApiError, and the
Server-Sent Events reader. Standard library only."""
import json
import os
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException

DEFAULT_URL = "http://127.0.0.1:8080"


class ApiError(Exception):
    """Every error the service answers: its HTTP status and problem+json (RFC 9457) fields.

    `field` names the part of the request at fault (a JSON pointer such as
    "/optimizer/learning_rate", or a query parameter); `problem` is the whole problem object."""

    def __init__(self, status, problem, method="", path=""):
        self.status = status
        self.problem = problem
        self.type = problem.get("type", "about:blank")
        self.title = problem.get("title", "")
        self.detail = problem.get("detail", "")
        self.field = problem.get("field")
        self.method, self.path = method, path
        where = f" (field {self.field})" if self.field else ""
        super().__init__(f"{method} {path}: HTTP {status} {self.title}: {self.detail}{where}")


class Unreachable(ApiError):
    """The coordinator did not answer (refused, reset, timed out), after the retries an
    idempotent call gets. Its status is 0."""

    def __init__(self, method, path, reason):
        super().__init__(0, {"type": "urn:pstrain:client:unreachable", "title": "Unreachable",
                             "detail": str(reason)}, method, path)


_IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE"}
_CONNECTION_ERRORS = (ConnectionError, socket.timeout, TimeoutError, HTTPException, OSError)


class Transport:
    def __init__(self, url=None, token=None, cafile=None, timeout=30.0, retries=3, insecure=False):
        self.url = (url or os.environ.get("PSTRAIN_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("PSTRAIN_TOKEN")
        cafile = cafile or os.environ.get("PSTRAIN_CACERT")
        self.timeout = timeout
        self.retries = retries
        self._context = None
        if self.url.startswith("https://"):
            self._context = ssl.create_default_context(cafile=cafile)
            if insecure:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        elif not self.url.startswith("http://"):
            raise ValueError(f"the URL must start with http:// or https://, not {self.url!r}")

    def _request(self, method, path, body, content_type, headers):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if content_type:
            h["Content-Type"] = content_type
        h.update(headers or {})
        return urllib.request.Request(self.url + path, data=body, headers=h, method=method)

    def open(self, method, path, body=None, content_type=None, headers=None, idempotent=None, timeout=None):
        """The raw response (the caller reads and closes it). Retries connection errors of an
        idempotent call (GET, HEAD, PUT, DELETE unless told otherwise) with a growing pause;
        raises ApiError for an answer of 400 or more, Unreachable when every try failed."""
        if idempotent is None:
            idempotent = method in _IDEMPOTENT
        tries = 1 + (self.retries if idempotent else 0)
        for attempt in range(tries):
            if hasattr(body, "seek") and attempt > 0:
                body.seek(0)
            try:
                return urllib.request.urlopen(self._request(method, path, body, content_type, headers),
                                              timeout=timeout or self.timeout, context=self._context)
            except urllib.error.HTTPError as e:
                raise _api_error(e, method, path) from None
            except urllib.error.URLError as e:
                reason = e.reason
            except _CONNECTION_ERRORS as e:
                reason = e
            if attempt + 1 < tries:
                time.sleep(min(4.0, 0.5 * 2 ** attempt))
        raise Unreachable(method, path, reason)

    def call(self, method, path, payload=None, idempotent=None, timeout=None):
        """A JSON request (payload: any JSON value, or None) and its JSON answer."""
        body = None if payload is None else json.dumps(payload).encode()
        with self.open(method, path, body, "application/json" if body is not None else None,
                       idempotent=idempotent, timeout=timeout) as r:
            data = r.read()
        return json.loads(data) if data else None

    def events(self, path, after=0, idle_timeout=60.0):
        """Yields (id, event, data) from a Server-Sent Events stream, from event `after` on; ends
        when the server closes it. Raises Unreachable (or a socket error) when it drops."""
        r = self.open("GET", path, headers={"Accept": "text/event-stream", "Last-Event-ID": str(after)},
                      timeout=idle_timeout)
        with r:
            event_id, event, data = None, "message", []
            while True:
                raw = r.readline()
                if not raw:
                    return
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data:
                        text = "\n".join(data)
                        yield (int(event_id) if event_id and event_id.isdigit() else None, event,
                               json.loads(text) if text.startswith("{") else text)
                    event_id, event, data = None, "message", []
                    continue
                if line.startswith(":"):
                    continue  # a comment: keep-alive
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "id":
                    event_id = value
                elif key == "event":
                    event = value
                elif key == "data":
                    data.append(value)


def _api_error(e, method, path):
    body = e.read() if hasattr(e, "read") else b""
    try:
        problem = json.loads(body)
        if not isinstance(problem, dict):
            raise ValueError
    except ValueError:
        problem = {"type": "about:blank", "title": e.reason or "", "detail": body.decode("utf-8", "replace")[:500]}
    return ApiError(e.code, problem, method, path)


def quote(part):
    return urllib.parse.quote(str(part), safe="")


def query(**params):
    items = {k: ("true" if v is True else "false" if v is False else v) for k, v in params.items() if v is not None}
    return "?" + urllib.parse.urlencode(items) if items else ""
