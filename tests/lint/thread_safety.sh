#!/usr/bin/env bash
# Checks the mutexes whose guarded members are annotated (common/base/mutex.h) with clang's
# thread-safety analysis: every source that includes common/base/mutex.h itself, or whose own
# header (x.cc's x.h) or any header it includes directly does (a class's members are often
# defined in several files; a header-only class is checked where it is used), tests aside, is
# compiled by clang with -fsyntax-only -Werror=thread-safety, with
# the flags of compile_commands.json. A member read or written without its mutex, a lock not
# released, a function called without what it requires: each fails this check.
# Usage: tests/lint/thread_safety.sh BUILD_DIR   (CTest `thread_safety`, label unit)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: thread_safety.sh BUILD_DIR}
clang=$(command -v clang++ || command -v clang++-14 || true)
[ -n "$clang" ] || { echo "thread_safety: clang++ not found (apt-get install clang): this check cannot run" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "thread_safety: $build/compile_commands.json missing" >&2; exit 1; }
/usr/bin/python3 - "$build" "$clang" <<'PY'
import json, os, re, shlex, subprocess, sys
build, clang = sys.argv[1], sys.argv[2]
root = os.getcwd()
includes = {}
def includes_of(path):
    if path not in includes:
        try:
            text = open(path, errors="replace").read()
        except OSError:
            text = ""
        includes[path] = [m.group(1) for m in re.finditer(r'#include "([^"]+)"', text)]
    return includes[path]
def annotated(header):
    return header.endswith(".h") and "common/base/mutex.h" in includes_of(header)
def uses_mutex_h(source):
    own_header = source[:-3] + ".h"
    return "common/base/mutex.h" in includes_of(source) or (
        os.path.exists(own_header) and "common/base/mutex.h" in includes_of(own_header)) or any(
        annotated(h) for h in includes_of(source))
commands = json.load(open(os.path.join(build, "compile_commands.json")))
def check_command(entry):
    args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
    keep = []
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith(("-fsanitize", "-march", "-mtune", "-flto", "-fno-fat-lto")) or a == entry["file"]:
            continue
        keep.append(a)
    return [clang, "-fsyntax-only", "-Wno-unknown-warning-option", "-Wno-ignored-optimization-argument",
            "-Wthread-safety", "-Werror=thread-safety"] + keep + [entry["file"]]
to_check = []
for entry in commands:
    source = os.path.relpath(entry["file"], root)
    if source.startswith(("..", "build", "tests/", "fuzz/")) or "/_deps/" in source or not source.endswith(".cc"):
        continue
    if uses_mutex_h(source):
        to_check.append((source, entry))
def run(item):
    source, entry = item
    return source, subprocess.run(check_command(entry), cwd=entry["directory"], capture_output=True, text=True)
from concurrent.futures import ThreadPoolExecutor
failed = []
with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    for source, result in pool.map(run, to_check):
        if result.returncode != 0:
            failed.append(source)
            sys.stderr.write(result.stderr)
checked = len(to_check)
print(f"thread_safety: {checked} sources checked, {len(failed)} failed" + (": " + ", ".join(failed) if failed else ""))
sys.exit(1 if failed or checked == 0 else 0)
PY
