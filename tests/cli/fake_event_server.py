#!/usr/bin/env python3
"""A stand-in coordinator for the CLI's event-stream tests: GET /v1/jobs/{id} and GET
/v1/jobs/{id}/events as the SSE contract (docs/sse-contract, the `sse` branch) describes them, with
scripted histories, so that `pstrain follow` can be tested on the stream whatever the real
coordinator serves yet.

Jobs: job-ok (3 epochs, SUCCEEDED; the first connection is cut after event CUT_AFTER without the
final state: the client must come back with Last-Event-ID), job-cancelled (CANCELLED, a
close-delimited body instead of chunks), job-failed (FAILED). Any other id: 404 job-not-found.
Prints "PSTRAIN_READY port=N" once listening and "events JOB last-event-id=X authorization=Y" per
stream request.
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EPOCHS, STEPS_PER_EPOCH, CUT_AFTER = 3, 10, 9
T0 = int(time.time() * 1000) - 60_000


def history(job, final_state, reason=""):
    events, t = [], T0
    def add(kind, **data):
        nonlocal t
        t += 500
        events.append((kind, dict(job=job, time_ms=t, **data)))
    add("state", state="PENDING", reason="")
    add("state", state="RUNNING", reason="")
    last_epoch = EPOCHS if final_state == "SUCCEEDED" else 1
    for epoch in range(1, last_epoch + 1):
        for step in (5, 10):
            done = (epoch - 1) * STEPS_PER_EPOCH + step
            add("progress", worker=0, epoch=epoch, step=done, loss=1.0 / (done + 1), accuracy=0.5,
                samples_per_second=12345.0, steps_done=done, total_steps=EPOCHS * STEPS_PER_EPOCH)
        add("epoch", epoch=epoch, train_loss=0.5 / epoch, train_accuracy=0.8 + epoch / 100,
            test_loss=0.4 / epoch, test_accuracy=0.85 + epoch / 100, samples_per_second=23410.0)
    if final_state == "FAILED":
        add("recovery", recoveries=1, replayed_steps=3, detail="worker-1 lost; replayed 3 steps")
    add("state", state=final_state, reason=reason)
    return events


JOBS = {
    "job-ok": history("job-ok", "SUCCEEDED"),
    "job-cancelled": history("job-cancelled", "CANCELLED", "cancelled by request"),
    "job-failed": history("job-failed", "FAILED", "loss became nan"),
}
CONNECTIONS = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, body, content_type="application/json"):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) < 3 or parts[:2] != ["v1", "jobs"]:
            return self.send_json(404, {"type": "urn:pstrain:problem:not-found", "title": "Not found", "status": 404,
                                        "detail": "no route for " + self.path}, "application/problem+json")
        job = parts[2]
        if job not in JOBS:
            return self.send_json(404, {"type": "urn:pstrain:problem:job-not-found", "title": "No such job",
                                        "status": 404, "detail": "there is no job '%s'" % job},
                                  "application/problem+json")
        if len(parts) == 3:
            return self.send_json(200, {"id": job, "name": "fake", "state": "RUNNING", "mode": "sync", "epoch": 1,
                                        "epochs": EPOCHS, "step": 0, "total_steps": EPOCHS * STEPS_PER_EPOCH,
                                        "steps_per_epoch": STEPS_PER_EPOCH, "started_at_ms": None})
        if len(parts) == 4 and parts[3] == "events":
            return self.events(job)
        return self.send_json(404, {"type": "urn:pstrain:problem:not-found", "status": 404, "detail": "no route"},
                              "application/problem+json")

    def events(self, job):
        last = self.headers.get("Last-Event-ID")
        print("events %s last-event-id=%s authorization=%s" % (job, last if last is not None else "none",
                                                              self.headers.get("Authorization", "none")), flush=True)
        n = CONNECTIONS[job] = CONNECTIONS.get(job, 0) + 1
        start = int(last) if last else 0
        chunked = job != "job-cancelled"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()

        def write(text):
            data = text.encode()
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                self.wfile.write(data)
            self.wfile.flush()

        write(": keep-alive\n\n")
        events = JOBS[job]
        for i in range(start, len(events)):
            kind, data = events[i]
            if job == "job-ok" and n == 1 and i == CUT_AFTER:
                self.close_connection = True
                return  # cut without the final state (and without the last chunk)
            # Split an event over two writes: the client must join pieces.
            text = "id: %d\nevent: %s\ndata: %s\n\n" % (i + 1, kind, json.dumps(data))
            write(text[:7])
            write(text[7:])
            time.sleep(0.01)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("PSTRAIN_READY port=%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
