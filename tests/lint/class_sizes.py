#!/usr/bin/env python3
"""Members per class or struct in the project's C++ headers and sources: the figure STYLE's rule
"classes under ~40 members" is about. A member is a declared name: each data member (`int a, b;`
is two), each function or constructor declared or defined, each nested type and alias. Counted by
reading the text (comments and strings removed), not by compiling: a figure to compare, not to
argue with.

Usage: tests/lint/class_sizes.py [--over N] [--top K] [DIR...]   (default: the code directories)
"""
import argparse
import os
import re
import sys

CODE_DIRS = ["common", "server", "worker", "coordinator", "cli"]


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'R"(\w*)\(.*?\)\1"', '""', text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    return re.sub(r"^\s*#[^\n]*", "", text, flags=re.M)


def drop_templates(s):
    # Removes <...> argument lists (nested) so commas inside them do not count as names.
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def count_statement(stmt):
    stmt = re.sub(r"\b(public|private|protected)\s*:", "", stmt).strip()
    if not stmt or stmt.startswith(("friend", "static_assert")):
        return 0
    if re.match(r"(template\s*<.*>\s*)?(using|typedef|enum|struct|class|union)\b", stmt, flags=re.S):
        return 1
    flat = drop_templates(stmt)
    head = re.split(r"[=({\[]", flat, maxsplit=1)
    if "(" in flat and ("=" not in flat or flat.index("(") < flat.index("=")):
        return 1  # a function (or an operator) declared or defined
    # Data: names separated by commas outside parentheses and braces.
    depth, names = 0, 1
    for ch in flat:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == "," and depth == 0:
            names += 1
    return names


def classes_in(text):
    """Yields (name, members) for every class or struct with a body."""
    for m in re.finditer(r"\b(class|struct)\s+(\w+)\s*(final\s*)?(:[^;{]*)?\{", text):
        name, i, depth = m.group(2), m.end(), 1
        members, stmt = 0, []
        while i < len(text) and depth > 0:
            ch = text[i]
            if ch == "{":
                if depth == 1:
                    body_start = "".join(stmt)
                    members += count_statement(body_start) if body_start.strip() else 0
                    stmt = []
                    # skip the body
                    d = 1
                    i += 1
                    while i < len(text) and d > 0:
                        d += {"{": 1, "}": -1}.get(text[i], 0)
                        i += 1
                    # a trailing ';' (nested type or `= {...};`) ends the statement
                    j = i
                    while j < len(text) and text[j] in " \t\n":
                        j += 1
                    if j < len(text) and text[j] == ";":
                        i = j + 1
                    continue
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == ";" and depth == 1:
                members += count_statement("".join(stmt))
                stmt = []
            elif ch == ":" and depth == 1 and re.search(r"\b(public|private|protected)\s*$", "".join(stmt)):
                stmt = []
                i += 1
                continue
            if depth == 1 and ch not in ";":
                stmt.append(ch)
            i += 1
        yield name, members


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--over", type=int, default=0, help="only classes with more members than this")
    ap.add_argument("--top", type=int, default=0, help="only the K largest")
    ap.add_argument("dirs", nargs="*", default=CODE_DIRS)
    args = ap.parse_args()
    rows = []
    for d in args.dirs:
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith((".h", ".cc")) and not f.endswith("_test.cc") and ".capnp." not in f:
                    path = os.path.join(root, f)
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        for name, n in classes_in(strip(fh.read())):
                            if n > args.over:
                                rows.append((n, name, path))
    rows.sort(key=lambda r: (-r[0], r[2]))
    if args.top:
        rows = rows[: args.top]
    for n, name, path in rows:
        print(f"{n:4d}  {name:32s} {path}")


if __name__ == "__main__":
    sys.exit(main())
