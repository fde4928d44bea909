#!/usr/bin/env bash
# The cost of --security=curve: relaxps-bench-ps on one worker and one
# server, once with plain TCP (the yardstick) and once with CurveZMQ, back to
# back in the same run: 16 MiB PushPull throughput and 4 KiB PushPull p50
# latency, one request in flight. Prints one JSON document
# {"figures": [{name, value, unit, yardstick, yardstick_value, ratio}]}.
#
#   bench/curve_bench.sh [ps bench flags, e.g. --seconds=1 --reps=3]
# Environment: BIN (the directory holding relaxps-bench-ps).
set -uo pipefail
BIN=${BIN:?set BIN to the bin directory of a build}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-curve-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ARGS=(--configs=1x1 --sizes=4096,16777216 --in_flight=1 --sparse=false "$@")
for mode in plain curve; do
  "$BIN/relaxps-bench-ps" "${ARGS[@]}" --security="$mode" >"$WORK/$mode.json" \
    2>"$WORK/$mode.log" || { tail -n 5 "$WORK/$mode.log" >&2; exit 1; }
done
python3 - "$WORK/plain.json" "$WORK/curve.json" <<'PY'
import json, sys

def figures(path):
    doc = json.load(open(path))
    out = {}
    def walk(x):
        if isinstance(x, dict):
            if "name" in x and "value" in x:
                out[x["name"]] = x["value"]
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(doc)
    return out

plain, curve = figures(sys.argv[1]), figures(sys.argv[2])
rows = []
for name, unit, label in (("dense/pushpull/w1s1/16MiB/if1/gbps", "GB/s", "16MiB_pushpull_gbps"),
                          ("dense/pushpull/w1s1/4KiB/if1/p50_us", "us", "4KiB_pushpull_p50_us")):
    p, c = plain.get(name), curve.get(name)
    rows.append({"name": "curve/" + label, "value": c, "unit": unit,
                 "yardstick": "plain/" + label, "yardstick_value": p,
                 "ratio": (c / p) if (p and c) else None})
    print(f"curve vs plain {label}: curve {c} plain {p} ratio "
          f"{(c / p) if (p and c) else 'n/a'}", file=sys.stderr)
print(json.dumps({"figures": rows}, indent=1))
PY
