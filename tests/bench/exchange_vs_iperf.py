#!/usr/bin/env python3
"""The gradient exchange next to loopback TCP, interleaved, with where each one's CPU goes.

Issue 20's exchange target is pstrain-exchange-bench (pushes and replies of every chunk, the
server's Adam update, the client's copy of the values) at >= 0.9 of iperf3's one stream, one way,
on loopback. This script runs, `--repeats` times in turn: iperf3 one stream, the exchange with one
client, the exchange with two clients (each --seconds long), against one pstrain-server and one
iperf3 server it starts itself. Per run it records the bytes per second and the CPU seconds each
process spent, user and system: iperf3's from its own JSON report (sender and receiver), the
exchange client's from its rusage (wait4), the server's from /proc/<pid>/stat before and after.
It prints a Markdown table of medians: GB/s (1e9 bytes per second, the exchange counting pushed
plus pulled bytes as cluster_bench.sh does), the ratio to iperf3, and CPU nanoseconds per byte
moved, split into user and system time, on each side.

With --perf, it then records one more run of each exchange with `perf record` on the server and
the client and prints each process's top symbols (where a target is missed, the profile that says
why).

Usage: tests/bench/exchange_vs_iperf.py [--repeats N] [--seconds S] [--spec FILE] [--perf]
Env: PSTRAIN_BUILD_DIR (default <repo>/build).
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(ROOT, "build"))
SERVER = os.path.join(BUILD, "server", "pstrain-server")
EXCHANGE = os.path.join(BUILD, "tests", "pstrain-exchange-bench")
TICK = os.sysconf("SC_CLK_TCK")


def die(message):
    print("exchange_vs_iperf.py: " + message, file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid):
    """(user, system) CPU seconds of a running process, its threads included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def run_timed(argv, log_path):
    """Runs argv to completion; returns (exit code, user s, system s) from its rusage."""
    with open(log_path, "w") as log:
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_utime, usage.ru_stime


def iperf_once(port, seconds, work):
    out = os.path.join(work, "iperf3.json")
    code, _, _ = run_timed(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-P", "1", "-J"], out)
    if code != 0:
        die("iperf3 failed: " + open(out).read()[:400])
    end = json.load(open(out))["end"]
    duration = end["sum_received"]["seconds"]
    moved = end["sum_received"]["bytes"]
    cpu = end["cpu_utilization_percent"]
    # The percentages are of one CPU over the test's duration: host = the sender (this client),
    # remote = the receiver (the server).
    return {
        "gbps": moved / duration / 1e9,
        "bytes": moved,
        "sender_user": cpu["host_user"] / 100 * duration,
        "sender_sys": cpu["host_system"] / 100 * duration,
        "receiver_user": cpu["remote_user"] / 100 * duration,
        "receiver_sys": cpu["remote_system"] / 100 * duration,
    }


def exchange_once(server_port, server_pid, clients, seconds, spec, work, wrap=(), batched=True):
    log = os.path.join(work, f"exchange-c{clients}.log")
    before = proc_cpu(server_pid)
    argv = list(wrap) + [EXCHANGE, "--server", f"127.0.0.1:{server_port}", "--spec", spec, "--seconds", str(seconds),
                         "--clients", str(clients), "--batched", "true" if batched else "false"]
    code, user, system = run_timed(argv, log)
    after = proc_cpu(server_pid)
    text = open(log).read()
    if code != 0:
        die(f"pstrain-exchange-bench failed ({log}): " + text[-600:])
    result = json.loads([line for line in text.splitlines() if line.startswith("RESULT ")][-1][7:])
    # The client's CPU covers its set-up and warm-up steps too (a few percent of a 5 s run).
    moved = result["gb_per_second"] * 1e9 * result["seconds"]
    return {
        "gbps": result["gb_per_second"],
        "bytes": moved,
        "client_user": user,
        "client_sys": system,
        "server_user": after[0] - before[0],
        "server_sys": after[1] - before[1],
        "seconds": result["seconds"],
    }


def ns_per_byte(runs, key):
    return statistics.median(r[key] / r["bytes"] * 1e9 for r in runs)


def perf_top(data, lines=14):
    argv = ["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio", "--percent-limit", "1.5"]
    text = subprocess.run(argv, capture_output=True, text=True).stdout
    rows = [line for line in text.splitlines() if re.match(r"\s+[0-9.]+%", line)]
    return "\n".join(rows[:lines])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--spec", default=os.path.join(ROOT, "deploy", "jobs", "mnist-mlp.json"))
    parser.add_argument("--perf", action="store_true")
    parser.add_argument("--unbatched", action="store_true",
                        help="also run the exchange with one push per chunk (--batched=false), interleaved")
    args = parser.parse_args()
    for path in (SERVER, EXCHANGE):
        if not os.access(path, os.X_OK):
            die(f"{path} not found: ninja -C {BUILD} pstrain-server pstrain-exchange-bench")
    if shutil.which("iperf3") is None:
        die("iperf3 not found (apt-get install iperf3)")

    work = tempfile.mkdtemp(prefix="exchange-vs-iperf-")
    iperf_port = free_port()
    iperf_server = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(iperf_port)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server_log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([SERVER, "--listen", "127.0.0.1:0", "--coordinator", "127.0.0.1:1", "--name",
                               "exchange-bench", "--data-dir", os.path.join(work, "server-data"), "--log-level",
                               "warning"], stdout=server_log, stderr=subprocess.STDOUT)
    try:
        server_port = None
        for _ in range(100):
            match = re.search(r"PSTRAIN_READY role=server port=([0-9]+)", open(server_log.name).read())
            if match:
                server_port = int(match.group(1))
                break
            time.sleep(0.1)
        if server_port is None:
            die("pstrain-server did not start: " + open(server_log.name).read()[-400:])
        time.sleep(0.3)

        iperf, one, two, one_unbatched, two_unbatched = [], [], [], [], []
        for rep in range(args.repeats):
            iperf.append(iperf_once(iperf_port, args.seconds, work))
            one.append(exchange_once(server_port, server.pid, 1, args.seconds, args.spec, work))
            two.append(exchange_once(server_port, server.pid, 2, args.seconds, args.spec, work))
            print(f"repeat {rep + 1}: iperf3 {iperf[-1]['gbps']:.3f} GB/s, exchange {one[-1]['gbps']:.3f} (1 client) "
                  f"{two[-1]['gbps']:.3f} (2 clients)", file=sys.stderr)
            if args.unbatched:
                one_unbatched.append(exchange_once(server_port, server.pid, 1, args.seconds, args.spec, work, batched=False))
                two_unbatched.append(exchange_once(server_port, server.pid, 2, args.seconds, args.spec, work, batched=False))
                print(f"  one push per chunk: {one_unbatched[-1]['gbps']:.3f} (1 client) "
                      f"{two_unbatched[-1]['gbps']:.3f} (2 clients)", file=sys.stderr)

        base = statistics.median(r["gbps"] for r in iperf)
        print(f"\n{args.repeats} interleaved repeats of {args.seconds:g} s, medians; spec {os.path.relpath(args.spec, ROOT)}\n")
        print("| transfer | GB/s | vs iperf3 | per-repeat ratios | sending side ns/B (user + sys) | receiving/serving side ns/B (user + sys) |")
        print("|---|---|---|---|---|---|")
        print(f"| iperf3, 1 stream, one way | {base:.3f} | 1.00 | - | "
              f"{ns_per_byte(iperf, 'sender_user'):.3f} + {ns_per_byte(iperf, 'sender_sys'):.3f} | "
              f"{ns_per_byte(iperf, 'receiver_user'):.3f} + {ns_per_byte(iperf, 'receiver_sys'):.3f} |")
        rows = [("exchange, 1 client", one), ("exchange, 2 clients", two)]
        if args.unbatched:
            rows += [("exchange, 1 client, one push per chunk", one_unbatched),
                     ("exchange, 2 clients, one push per chunk", two_unbatched)]
        for name, runs in rows:
            gbps = statistics.median(r["gbps"] for r in runs)
            ratios = ", ".join(f"{r['gbps'] / i['gbps']:.2f}" for r, i in zip(runs, iperf))
            print(f"| {name} (pushed + pulled) | {gbps:.3f} | {gbps / base:.2f} | {ratios} | "
                  f"client {ns_per_byte(runs, 'client_user'):.3f} + {ns_per_byte(runs, 'client_sys'):.3f} | "
                  f"server {ns_per_byte(runs, 'server_user'):.3f} + {ns_per_byte(runs, 'server_sys'):.3f} |")
        print("\n(ns/B: CPU nanoseconds per byte counted; the exchange client's include its set-up and warm-up.)")

        if args.perf:
            for clients in (1, 2):
                server_data = os.path.join(work, f"perf-server-c{clients}.data")
                client_data = os.path.join(work, f"perf-client-c{clients}.data")
                recorder = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(server.pid), "-o", server_data],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)
                exchange_once(server_port, server.pid, clients, args.seconds, args.spec, work,
                              wrap=("perf", "record", "-F", "999", "-g", "-o", client_data, "--"))
                recorder.send_signal(2)
                recorder.wait()
                print(f"\nperf, exchange with {clients} client(s): the server's top symbols\n")
                print(perf_top(server_data))
                print(f"\nperf, exchange with {clients} client(s): the client's top symbols\n")
                print(perf_top(client_data))
    finally:
        server.terminate()
        iperf_server.terminate()
        server.wait()
        iperf_server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
