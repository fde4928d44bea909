#!/usr/bin/env bash
# install_test.sh SRC BUILD
# cmake --install into a fresh prefix, then, from a clean environment:
# `import relaxps` with PYTHONPATH=<prefix>/lib/python3/dist-packages (the
# module must come from the prefix and load the prefix's
# librelaxps_client.so), the same after moving the prefix (relative RPATH),
# and the README's Python snippet trained against the installed binaries.
set -euo pipefail
SRC=$1
BUILD=$2
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
PY=(env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3)
check_import() {  # check_import PREFIX
  local site="$1/lib/python3/dist-packages" out
  out=$(cd / && "${PY[@]}" -c "
import sys; sys.path.insert(0, '$site')
import relaxps, relaxps.torch
print(relaxps.__file__)
print(relaxps._relaxps.__file__)" 2>&1) || { echo "import relaxps from $site failed: $out"; exit 1; }
  grep -q "^$site/relaxps/__init__.py$" <<<"$out" || { echo "relaxps came from elsewhere: $out"; exit 1; }
  local so
  so=$(tail -n 1 <<<"$out")
  ldd "$so" >"$TMP/ldd.txt"
  local lib
  lib=$(sed -n 's/.*librelaxps_client.so.0 => \([^ ]*\) .*/\1/p' "$TMP/ldd.txt")
  [ -n "$lib" ] && [ "$(realpath "$lib")" = "$(realpath "$1/lib/librelaxps_client.so.0")" ] || {
    echo "$so does not load $1/lib/librelaxps_client.so.0:"; cat "$TMP/ldd.txt"; exit 1; }
  if grep -Ei "rocksdb|blas|gflags|glog|libpython" "$TMP/ldd.txt"; then
    echo "$so links more than the client library needs"; exit 1
  fi
  echo "import relaxps: $so"
}
check_import "$TMP/prefix"
mv "$TMP/prefix" "$TMP/moved"
check_import "$TMP/moved"

# The README's Python snippet, as a reader would paste it, on the installed job.
sed -n '/<!-- python-snippet: begin -->/,/<!-- python-snippet: end -->/p' "$SRC/README.md" |
  sed '1,2d;$d' | sed '$d' >"$TMP/snippet.py"
grep -q "ps.step()" "$TMP/snippet.py" || { echo "README Python snippet not found"; exit 1; }
"$TMP/moved/bin/relaxps-coordinator" --endpoint_file="$TMP/coord" --num_servers=1 \
  >"$TMP/coord.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$TMP/coord" ] && break; sleep 0.1; done
"$TMP/moved/bin/relaxps-server" --coordinator="$(cat "$TMP/coord")" --store=memory \
  >"$TMP/server.log" 2>&1 &
PIDS+=($!)
out=$(cd / && env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 \
  PYTHONPATH="$TMP/moved/lib/python3/dist-packages" timeout 120 /usr/bin/python3 \
  "$TMP/snippet.py" "$(cat "$TMP/coord")" 2>&1) || { echo "README snippet failed: $out"; exit 1; }
echo "$out"
grep -q "^worker 0: loss [0-9.]* at clock 200$" <<<"$out" || { echo "unexpected output"; exit 1; }
loss=$(sed -n 's/^worker 0: loss \([0-9.]*\) .*/\1/p' <<<"$out")
awk -v l="$loss" 'BEGIN { exit !(l < 0.5) }' || { echo "loss $loss did not fall below 0.5"; exit 1; }
echo "install: relaxps imported from the prefix (and after moving it); the README snippet trained"
