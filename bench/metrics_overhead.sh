#!/usr/bin/env bash
# The hot-path cost of Prometheus metrics: relaxps-bench-ps (1 worker, 1
# server, dense 4 KiB and 1 MiB PushPull/push/pull, 1 and 8 in flight) with
# --metrics (servers and coordinator keep metrics, scraped every 100 ms)
# against without, alternated ROUNDS times so that load drifts hit both.
# Prints one JSON document: per figure the best of each side over the rounds
# (fastest: load only ever slows a run down) and the ratio metrics-on /
# metrics-off (1.0: no cost; for latencies above 1 is a cost, for throughputs
# below 1 is); and relaxps-bench-metrics' per-request cost of the server's
# hooks as a fraction of the 4 KiB PushPull p50 latency measured here.
#   bench/metrics_overhead.sh [--rounds=3] [--seconds=1]   (BIN_DIR: build/bin)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN_DIR:-$ROOT/build/bin}
ROUNDS=3
SECONDS_PER_REP=1
for arg in "$@"; do
  case "$arg" in
    --rounds=*) ROUNDS=${arg#*=} ;;
    --seconds=*) SECONDS_PER_REP=${arg#*=} ;;
    *) echo "metrics_overhead.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
OUT=$(mktemp -d /tmp/relaxps_metrics_bench_XXXXXX)
trap 'rm -rf "$OUT"' EXIT
"$BIN/relaxps-bench-metrics" >"$OUT/hooks.json" || { echo "metrics_overhead.sh: relaxps-bench-metrics failed" >&2; exit 1; }
for r in $(seq 1 "$ROUNDS"); do
  for m in false true; do
    "$BIN/relaxps-bench-ps" --configs=1x1 --sizes=4096,1048576 --in_flight=1,8 --sparse=false \
      --seconds="$SECONDS_PER_REP" --reps=2 --metrics=$m >"$OUT/$m-$r.json" 2>"$OUT/$m-$r.log" ||
      { echo "metrics_overhead.sh: relaxps-bench-ps --metrics=$m failed" >&2; tail "$OUT/$m-$r.log" >&2; exit 1; }
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
vals = {}
for side in ("false", "true"):
    for r in range(1, rounds + 1):
        for f in json.load(open(os.path.join(out, f"{side}-{r}.json")))["results"]:
            vals.setdefault(f["name"], {}).setdefault(side, []).append((f["value"], f["better"]))
figures = []
for name, sides in sorted(vals.items()):
    if "false" not in sides or "true" not in sides:
        continue
    best = max if sides["false"][0][1] == "higher" else min
    off = best(v for v, _ in sides["false"])
    on = best(v for v, _ in sides["true"])
    figures.append({"name": name, "metrics_off": off, "metrics_on": on,
                    "ratio_on_off": on / off if off else None, "better": sides["false"][0][1]})
hooks = {r["name"]: r for r in json.load(open(os.path.join(out, "hooks.json")))["results"]}
hook_ns = hooks["server_hooks_per_request_ns"]["value"]
p50 = next(f["metrics_off"] for f in figures if f["name"] == "dense/pushpull/w1s1/4KiB/if1/p50_us")
print(json.dumps({"bench": "metrics_overhead", "rounds": rounds,
                  "hooks_ns_per_request": hook_ns,
                  "hooks_fraction_of_4KiB_pushpull_p50": hook_ns / (p50 * 1000),
                  "hooks": list(hooks.values()), "figures": figures}, indent=1))
PY
