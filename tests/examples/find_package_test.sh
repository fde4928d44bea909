#!/usr/bin/env bash
# Installs relaxps into a temporary prefix, builds examples/ against it with
# find_package(relaxps), and trains the example against a real local job.
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
cmake -S "$SRC/examples" -B "$TMP/build" -DCMAKE_PREFIX_PATH="$TMP/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$TMP/configure.log" 2>&1 || { cat "$TMP/configure.log"; exit 1; }
cmake --build "$TMP/build" -j 2 >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; exit 1; }
# The client library needs no kernels/ and so no BLAS (fp16 is the host codec).
if ldd "$TMP/build/linear_trainer" | grep -qi blas; then
  echo "linear_trainer links BLAS:"; ldd "$TMP/build/linear_trainer"; exit 1
fi

"$TMP/prefix/bin/relaxps-coordinator" --endpoint_file="$TMP/coord" --num_servers=1 \
  >"$TMP/coord.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$TMP/coord" ] && break; sleep 0.1; done
COORD=$(cat "$TMP/coord")
"$TMP/prefix/bin/relaxps-server" --coordinator="$COORD" >"$TMP/server.log" 2>&1 &
PIDS+=($!)
"$TMP/build/linear_trainer" "$COORD" 300 &
A=$!
"$TMP/build/linear_trainer" "$COORD" 300 &
B=$!
wait $A
wait $B
echo "find_package(relaxps) example trained through the installed client library"
