#!/usr/bin/env bash
# find_package_test.sh SRC BUILD [install|deb]
# Installs relaxps into a fresh temporary prefix (install: cmake --install;
# deb: cpack -G DEB, then every package (librelaxps-client, -dev, relaxps-server, ...) unpacked
# with dpkg -x into an empty root), builds examples/ against it with
# find_package(relaxps COMPONENTS client) and with pkg-config relaxps (both
# -Wall -Wextra -Werror), checks what they link, and trains both, and the
# README's snippet, against a job of the installed binaries.
set -euo pipefail
SRC=$1
BUILD=$2
MODE=${3:-install}
# Set by sanitizer builds (tests/examples/CMakeLists.txt): the trainers are
# built with the same instrumentation as the installed library.
SAN=${RELAXPS_SANITIZER_FLAGS:-}
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

if [ "$MODE" = deb ]; then
  (cd "$BUILD" && cpack -G DEB -B "$TMP/debs" >"$TMP/cpack.log" 2>&1) || { cat "$TMP/cpack.log"; exit 1; }
  for deb in "$TMP"/debs/*.deb; do
    echo "$(basename "$deb"): $(dpkg-deb -f "$deb" Package Version Depends | tr '\n' ' ')"
    dpkg -x "$deb" "$TMP/root"
  done
  [ -e "$TMP/root/usr/include/relaxps/client.h" ] || { echo "no librelaxps-client-dev content"; exit 1; }
  [ -x "$TMP/root/usr/bin/relaxps-server" ] || { echo "no relaxps-server content"; exit 1; }
  ln -s "$TMP/root/usr" "$TMP/prefix"
else
  cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
fi
cmake -S "$SRC/examples" -B "$TMP/build" -DCMAKE_PREFIX_PATH="$TMP/prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="$SAN" \
  >"$TMP/configure.log" 2>&1 || { cat "$TMP/configure.log"; exit 1; }
cmake --build "$TMP/build" -j 2 >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; exit 1; }
# Only the public headers are installed, none of them includes glog.
if find "$TMP/prefix/include/" -type f | grep -v "^$TMP/prefix/include/relaxps/"; then
  echo "headers installed outside include/relaxps"; exit 1
fi
if grep -rl "glog\|gflags" "$TMP/prefix/include"; then echo "public headers name glog"; exit 1; fi
# The trainer links librelaxps_client.so and, through it, libzmq and
# protobuf: no RocksDB, BLAS, gflags or glog.
check_links() {
  # (Into a file first: grep -q closing the pipe early would fail ldd under pipefail.)
  ldd "$1" >"$TMP/ldd.txt"
  grep -q "librelaxps_client.so" "$TMP/ldd.txt" || { echo "$1 does not link librelaxps_client.so"; exit 1; }
  if grep -Ei "rocksdb|blas|gflags|glog" "$TMP/ldd.txt"; then
    echo "$1 links a server-side library:"; cat "$TMP/ldd.txt"; exit 1
  fi
}
check_links "$TMP/build/linear_trainer"
# pkg-config, with the same warnings as errors. The packages' relaxps.pc says
# prefix=/usr (they install there); unpacked elsewhere, --define-prefix
# takes the prefix from where the .pc lies.
PC=(pkg-config)
if [ "$MODE" = deb ]; then PC+=(--define-prefix); fi
PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig" "${PC[@]}" --exists relaxps
g++ -std=c++17 -Wall -Wextra -Werror $SAN "$SRC/examples/linear_trainer.cc" -o "$TMP/pc_trainer" \
  $(PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig" "${PC[@]}" --cflags --libs relaxps) \
  -Wl,-rpath,"$TMP/prefix/lib"
check_links "$TMP/pc_trainer"
# The README's client snippet, as a reader would paste it.
sed -n '/<!-- readme-snippet: begin -->/,/<!-- readme-snippet: end -->/p' "$SRC/README.md" |
  sed '1,2d;$d' | sed '$d' >"$TMP/readme_snippet.cc"
grep -q "int main" "$TMP/readme_snippet.cc" || { echo "README snippet not found"; exit 1; }
g++ -std=c++17 -Wall -Wextra -Werror $SAN "$TMP/readme_snippet.cc" -o "$TMP/readme_snippet" \
  $(PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig" "${PC[@]}" --cflags --libs relaxps) \
  -Wl,-rpath,"$TMP/prefix/lib"

"$TMP/prefix/bin/relaxps-coordinator" --endpoint_file="$TMP/coord" --num_servers=1 \
  >"$TMP/coord.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$TMP/coord" ] && break; sleep 0.1; done
COORD=$(cat "$TMP/coord")
"$TMP/prefix/bin/relaxps-server" --coordinator="$COORD" >"$TMP/server.log" 2>&1 &
PIDS+=($!)
"$TMP/build/linear_trainer" "$COORD" 300 &
A=$!
"$TMP/pc_trainer" "$COORD" 300 &
B=$!
wait $A
wait $B
# The README snippet trains a dense and a sparse table and passes its barrier.
"$TMP/readme_snippet" "$COORD"
# A malformed endpoint is refused at once, not after a timeout.
if out=$(timeout 5 "$TMP/readme_snippet" "127.0.0.1:1" 2>&1); then
  echo "connect to a malformed endpoint succeeded"; exit 1
fi
grep -q "InvalidArgument" <<<"$out" || { echo "malformed endpoint: $out"; exit 1; }
echo "$MODE: find_package(relaxps COMPONENTS client) and pkg-config relaxps trainers and the README snippet trained through the installed librelaxps_client.so"
ldd "$TMP/build/linear_trainer" | awk '{print "  " $1}' | tr '\n' ' '; echo
