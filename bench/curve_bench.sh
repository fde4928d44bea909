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

# What CURVE adds per GB moved (both processes' CPU: the bench runs client
# and server in one process) against what libsodium's cipher itself costs:
# every byte moved is encrypted once by its sender and decrypted once by its
# receiver (CurveZMQ's crypto_box_afternm, XSalsa20-Poly1305), measured here
# on CPU time over 2 MiB messages (a 16 MiB request's parts).
def sodium_enc_dec_cpu_s_per_gb(msg_bytes=2 << 20, min_s=0.3):
    import ctypes, ctypes.util, time
    lib = ctypes.util.find_library("sodium")
    if not lib:
        return None
    na = ctypes.CDLL(lib)
    if na.sodium_init() < 0:
        return None
    pk, sk = ctypes.create_string_buffer(32), ctypes.create_string_buffer(32)
    na.crypto_box_keypair(pk, sk)
    k = ctypes.create_string_buffer(32)
    na.crypto_box_beforenm(k, pk, sk)
    nonce = ctypes.create_string_buffer(24)
    plain = ctypes.create_string_buffer(b"\x01" * msg_bytes, msg_bytes)
    boxed = ctypes.create_string_buffer(msg_bytes + 16)
    opened = ctypes.create_string_buffer(msg_bytes)
    n = ctypes.c_ulonglong(msg_bytes)
    t0, moved = time.process_time(), 0
    while time.process_time() - t0 < min_s:
        na.crypto_box_easy_afternm(boxed, plain, n, nonce, k)
        if na.crypto_box_open_easy_afternm(opened, boxed, ctypes.c_ulonglong(msg_bytes + 16),
                                           nonce, k) != 0:
            return None
        moved += msg_bytes
    return (time.process_time() - t0) / (moved / 1e9)

sodium = sodium_enc_dec_cpu_s_per_gb()
cpu = "dense/pushpull/w1s1/16MiB/if1/cpu_s_per_gb"
pc, cc = plain.get(cpu), curve.get(cpu)
added = (cc - pc) if (pc is not None and cc is not None) else None
rows.append({"name": "curve/16MiB_pushpull_added_cpu_s_per_gb", "value": added,
             "unit": "CPU s/GB", "yardstick": "libsodium/enc_dec_cpu_s_per_gb",
             "yardstick_value": sodium,
             "ratio": (added / sodium) if (added is not None and sodium) else None,
             "better": "lower", "curve_cpu_s_per_gb": cc, "plain_cpu_s_per_gb": pc})
print(f"curve added CPU s/GB {added} libsodium enc+dec s/GB {sodium}", file=sys.stderr)
print(json.dumps({"figures": rows}, indent=1))
PY
