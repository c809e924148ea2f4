#!/usr/bin/env bash
# hostile.sh OUTDIR [BUILD] [DATA] [RUNS]: issue 22's attacks against feedd on
# 127.0.0.1 (attack.py beside this script): RSS added by a CONTINUATION flood
# over TLS without a token and over plaintext at default settings (peak, and
# what is left 2 s after the cut), scrapes answered during and after 2,000
# idle connections to the metrics port, and the time SIGTERM takes under each
# attack. Writes OUTDIR/runs.jsonl (one JSON line per measurement) and
# OUTDIR/summary.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:?usage: hostile.sh OUTDIR [BUILD] [DATA] [RUNS]}" && cd "$1" && pwd)
build=${2:-build}
data=${3:-/work/shared/datasets/imagenet-sample}
runs=${4:-20}
certs=$(mktemp -d)
trap 'rm -rf "$certs"' EXIT
"$here/../../tests/server/make_test_certs.sh" "$certs" > /dev/null
/usr/bin/python3 "$here/attack.py" "$build/server/feedd" "$data" "$certs" "$runs" | tee "$out/runs.jsonl"
/usr/bin/python3 - "$out/runs.jsonl" > "$out/summary.txt" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(xs): return '%.1f (%.1f-%.1f)' % (statistics.median(xs), min(xs), max(xs))
for tls in (True, False):
    r = [x for x in rows if x['case'] == 'flood' and x['tls'] == tls]
    print('%s flood, %d runs: sent MiB %s; peak RSS added MiB %s; left after MiB %s; stop s %s' % (
        'TLS no-token' if tls else 'plaintext', len(r), med([x['sent_mib'] for x in r]),
        med([x['peak_added_mib'] for x in r]), med([x['after_added_mib'] for x in r]),
        med([x['stop_s'] for x in r])))
r = [x for x in rows if x['case'] == 'metrics_idle']
print('metrics, %d idle connections, %d runs: scrapes answered during %d/%d, after %d/%d; stop s %s' % (
    r[0]['idle'], len(r), sum(x['during_ok'] for x in r), sum(x['during_of'] for x in r),
    sum(x['after_ok'] for x in r), sum(x['after_of'] for x in r), med([x['stop_s'] for x in r])))
for a in ('tls_flood', 'plain_flood', 'metrics_idle'):
    r = [x for x in rows if x['case'] == 'sigterm' and x['attack'] == a]
    ok = sum(1 for x in r if x['rc'] == 0 and x['stop_s'] <= 10)
    print('SIGTERM under %s: exit 0 within the 10 s drain deadline %d of %d; seconds %s' % (
        a, ok, len(r), med([x['stop_s'] for x in r])))
PY
cat "$out/summary.txt"
