#!/usr/bin/env bash
# bench/client_bench.py on the smallest setting (1 round, 50 ms windows):
# every figure of the public C++ API, the Python module and the echo is
# there, finite and positive where it must be, with the page faults and CPU
# of clients and servers; and no process it started is left behind.
#   client_bench_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
SRC=$1
BIN=$2
PYDIR="$(dirname "$BIN")/python"
[ -d "$PYDIR/relaxps" ] || PYDIR=""  # A build without the Python module.
OUT=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-client-bench-test.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
# Every process the bench starts inherits this tag: the check at the end
# finds only this run's (another bench may be running on the machine).
TAG="relaxps_client_bench_test_$$_$RANDOM"
env RELAXPS_CLIENT_BENCH_TEST_TAG="$TAG" /usr/bin/python3 "$SRC/bench/client_bench.py" \
  --bin="$BIN" --pythonpath="$PYDIR" --rounds=1 --seconds=0.05 >"$OUT/doc.json" \
  2>"$OUT/err.log" || { cat "$OUT/err.log" >&2; exit 1; }
/usr/bin/python3 - "$OUT/doc.json" "$PYDIR" <<'PY'
import json, math, sys
doc = json.load(open(sys.argv[1]))
python = bool(sys.argv[2])
figs = {f["name"]: f for f in doc["results"]}
c = "client/dense"
want = [f"{c}/push_then_pull/w1s1/16MiB/gbps", f"{c}/push_then_pull/w1s1/16MiB/spread",
        f"{c}/push_then_pull/w1s1/16MiB/client_faults_per_gb",
        f"{c}/push_then_pull/w1s1/16MiB/client_cpu_s_per_gb", f"{c}/pushpull/w1s1/1MiB/gbps",
        f"{c}/pushpull/w1s1/4KiB/p50_us", f"{c}/push_then_pull/w1s1/16MiB/python_vs_cpp",
        f"{c}/pushpull/w1s1/4KiB/python_vs_cpp", f"{c}/push_then_pull/w2s2/16MiB/gbps",
        f"{c}/push_then_pull/w2s2/16MiB/spread",
        f"{c}/push_then_pull/w2s2/16MiB/client_faults_per_gb",
        f"{c}/push_then_pull/w2s2/16MiB/client_cpu_s_per_gb"]
if not python:
    want = [n for n in want if not n.endswith("python_vs_cpp")]
missing = [n for n in want if n not in figs]
assert not missing, f"missing figures: {missing}"
for n in want:
    f = figs[n]
    for key in ("value", "yardstick_value"):
        v = f[key]
        assert isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, (n, key, v)
for n in (f"{c}/push_then_pull/w1s1/16MiB/gbps", f"{c}/pushpull/w1s1/1MiB/gbps",
          f"{c}/push_then_pull/w2s2/16MiB/gbps", f"{c}/pushpull/w1s1/4KiB/p50_us"):
    assert figs[n]["value"] > 0 and figs[n]["yardstick_value"] > 0 and figs[n]["ratio"] > 0, n
cpu = figs[f"{c}/push_then_pull/w2s2/16MiB/client_cpu_s_per_gb"]
assert cpu["value"] > 0 and cpu["server_cpu_s_per_gb"] > 0, cpu
assert cpu["echo_server_cpu_s_per_gb"] > 0, cpu
print("client_bench: %d figures, load %s" % (len(figs), doc["load_avg"]))
PY
# Everything it started was stopped.
left=$(grep -l "RELAXPS_CLIENT_BENCH_TEST_TAG=$TAG" /proc/[0-9]*/environ 2>/dev/null || true)
if [ -n "$left" ]; then
  echo "client_bench.py left processes behind:" >&2
  for e in $left; do
    pid=${e#/proc/}; pid=${pid%/environ}
    tr '\0' ' ' <"/proc/$pid/cmdline" >&2 2>/dev/null; echo >&2
  done
  exit 1
fi
