#!/usr/bin/env bash
# The worker and the standalone trainer never open a database, so they must not link one: their
# binaries' dynamic dependencies (ldd) name no librocksdb. pstrain_storage is the only library
# that links RocksDB (common/CMakeLists.txt); a PUBLIC link to it from a library the worker uses
# would bring it back.
# Usage: no_rocksdb.sh BINARY...
set -euo pipefail
command -v ldd >/dev/null || { echo "no_rocksdb: ldd is missing" >&2; exit 1; }
status=0
for binary in "$@"; do
  [ -x "$binary" ] || { echo "no_rocksdb: no binary $binary" >&2; status=1; continue; }
  if ldd "$binary" | grep -i rocksdb; then
    echo "no_rocksdb: $binary links RocksDB (above)" >&2
    status=1
  else
    echo "no_rocksdb: $(basename "$binary") links no RocksDB"
  fi
done
exit "$status"
