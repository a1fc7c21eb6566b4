#!/usr/bin/env bash
# Runs a netbed test binary (its arguments) if this machine can host the bed, else exits 77
# (CTest: skipped): not root, or no `ip netns`. Removes any bed a crashed run left behind.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
"$here/netbed.sh" check || exit $?
exec "$@"
