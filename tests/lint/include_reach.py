#!/usr/bin/env python3
"""How far a header reaches: the translation units (.cc) of the project that include it, directly
or through other headers, by top directory. What a change to the header recompiles in every build
tree (the release build, both sanitizer trees): the figure behind "specs narrowed at the edge".
Read from the #include lines, not from a build.

Usage: tests/lint/include_reach.py HEADER...   e.g. tests/lint/include_reach.py common/data/job_spec.h
"""
import os
import re
import sys

DIRS = ["common", "server", "worker", "coordinator", "cli", "tests", "fuzz"]


def main():
    includes = {}
    for d in DIRS:
        for root, _, files in os.walk(d):
            if "node_modules" in root:
                continue
            for f in files:
                if f.endswith((".h", ".cc")):
                    path = os.path.join(root, f)
                    with open(path, errors="replace") as fh:
                        includes[path] = {m.group(1) for m in re.finditer(r'#include "([^"]+)"', fh.read())}

    def closure(path):
        seen, stack = set(), [path]
        while stack:
            for inc in includes.get(stack.pop(), ()):
                if inc not in seen:
                    seen.add(inc)
                    stack.append(inc)
        return seen

    reach = {p: closure(p) for p in includes if p.endswith(".cc")}
    for header in sys.argv[1:]:
        units = [p for p, seen in reach.items() if header in seen]
        by_dir = {}
        for p in units:
            by_dir[p.split("/")[0]] = by_dir.get(p.split("/")[0], 0) + 1
        direct = sum(1 for p in includes if header in includes[p])
        print(f"{header}: {len(units)} translation units ({', '.join(f'{d} {n}' for d, n in sorted(by_dir.items()))});"
              f" {direct} files include it directly")


if __name__ == "__main__":
    main()
