#!/usr/bin/env bash
# Every source path a map of the code names must exist: a doc that names files which were renamed
# or removed sends readers to nothing (docs/ARCHITECTURE.md once named job_recovery.cc,
# job_takeover.cc and job_cut.cc long after they had become coordinator/job/rollback.cc,
# takeover.cc and sync_cut.cc).
#
# Usage: tests/lint/doc_paths.sh [ROOT [DOC...]]
#   ROOT  the project's root (default: two levels above this script)
#   DOC   the documents to check, relative to ROOT or absolute (default: docs/ARCHITECTURE.md)
#
# A path is a token that starts with a top-level folder of the project (common/ coordinator/
# server/ worker/ cli/ tests/ deploy/ docs/ fuzz/ clients/ web/ tools/ .ci/), not preceded by a
# letter, digit, '.', '/', '_' or '-' (so ../shared/... and URLs are not paths of ours), made of
# letters, digits and _ . - + / * and brace groups. Braces expand as the shell's do
# (common/rpc/heartbeat_thread.{h,cc} is two paths); a path with * must match at least one file;
# a trailing '.' ends a sentence and a trailing '**' Markdown's bold, not the path. Paths relative to a folder the text is about
# (`job/rollback.cc`, `nn/`) do not start with a top-level folder and are not checked: write the
# full path where it matters.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
shift || true
docs=("$@")
[ ${#docs[@]} -eq 0 ] && docs=(docs/ARCHITECTURE.md)
cd "$root"

prefixes='common|coordinator|server|worker|cli|tests|deploy|docs|fuzz|clients|web|tools|\.ci'
# One path: segments of [A-Za-z0-9_.*+-] and '/', or brace groups {a,b}.
token="(${prefixes})/([A-Za-z0-9_.*+-]|/|\{[A-Za-z0-9_.,*/+-]*\})*"

# expand PATH: print PATH with its first brace group expanded, recursively.
expand() {
  local t=$1
  if [[ $t =~ ^([^{]*)\{([^}]*)\}(.*)$ ]]; then
    local pre=${BASH_REMATCH[1]} alts=${BASH_REMATCH[2]} post=${BASH_REMATCH[3]} part
    local -a parts
    IFS=, read -ra parts <<< "$alts"
    for part in "${parts[@]}"; do expand "$pre$part$post"; done
  else
    printf '%s\n' "$t"
  fi
}

status=0
checked=0
for doc in "${docs[@]}"; do
  if [ ! -f "$doc" ]; then
    echo "doc paths: $doc: no such document" >&2
    status=1
    continue
  fi
  # -n -o: one "LINE:MATCH" per path; the leading character (start of line or a separator) is
  # part of the match so that the token is not the tail of a longer path or a URL.
  while IFS= read -r hit; do
    line=${hit%%:*}
    raw=${hit#*:}
    raw=${raw#[^A-Za-z0-9_.]}      # the separator before the token, if any
    raw=${raw%\*\*}                # Markdown's bold after a folder (**coordinator/**)
    raw=${raw%.}                   # a sentence's full stop
    while IFS= read -r path; do
      [ -n "$path" ] || continue
      checked=$((checked + 1))
      if [[ $path == *[*]* ]]; then
        compgen -G "$path" >/dev/null && continue
      elif [ -e "$path" ]; then
        continue
      fi
      echo "doc paths: $doc:$line: $path does not exist" >&2
      status=1
    done < <(expand "$raw")
  done < <(grep -noE "(^|[^A-Za-z0-9_./-])${token}" "$doc" || true)
done
[ "$status" = 0 ] && echo "doc paths: ok ($checked paths in ${docs[*]})"
exit "$status"
