#!/usr/bin/env bash
# scripts/package_test.sh: the Debian packages, installed the way a user
# installs them, on a clean Debian made for the test (docs/install.md).
# Run by hand as root (8-12 minutes on a loaded 2-core machine, mostly
# debootstrap and apt-get; not a ctest, so not in CI):
#
#   scripts/package_test.sh [--keep]
#
# 1. Builds the packages: a build directory for /usr (default build-deb/,
#    PKG_BUILD_DIR; tests and benchmarks off), cpack -G DEB; prints each
#    package's Depends, runs lintian on each (fails on any error or warning).
# 2. Makes a clean Debian root with debootstrap (minbase, the suite and
#    mirrors of this machine's /etc/apt/sources.list.d/debian.sources), and
#    inside it (chroot) installs with `apt-get install ./*.deb`:
#    a. the client packages (librelaxps-client, librelaxps-client-dev) and
#       a compiler, cmake and pkgconf: `dpkg -l` shows that this pulled no
#       RocksDB, glog, gflags, OpenBLAS, ZooKeeper or cpp-httplib;
#    b. python3-relaxps, checked the same way;
#    c. relaxps-server (and relaxps-cuda when built): a coordinator and a
#       server from /usr/bin, and three trainers against them, each built
#       or run from the installed packages alone: examples/ with CMake's
#       find_package(relaxps COMPONENTS client), examples/linear_trainer.cc
#       with `pkg-config --cflags --libs relaxps`, and a Python trainer
#       (`import relaxps`); relaxps-worker --device=cuda shows the error of
#       a CUDA back end whose NVIDIA libraries are missing.
# Prints PASS at the end, or what failed (exit 1). --keep leaves the root
# (in $TMPDIR) for inspection. Needs debootstrap, lintian (apt-get install
# debootstrap lintian) and the Debian mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
KEEP=0
for arg in "$@"; do
  case "$arg" in
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "package_test.sh: unknown argument $arg (--keep, --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "package_test.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
for tool in debootstrap lintian cpack dpkg-deb; do
  command -v "$tool" >/dev/null ||
    { echo "package_test.sh: $tool missing (apt-get install debootstrap lintian cmake)" >&2; exit 2; }
done
BUILD=${PKG_BUILD_DIR:-$SRC/build-deb}
JOBS=${JOBS:-2}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-package-test.XXXXXX")
ROOT=$WORK/root
step() { echo; echo "== $*"; }
fail() { echo "package_test.sh: FAIL: $*" >&2; exit 1; }
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }
cleanup() {
  local rc=$?
  if [ -d "$ROOT/proc" ]; then
    # Every process still running inside the root is one this test started.
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && kill -KILL "${p#/proc/}" 2>/dev/null
    done
    for m in dev/pts dev proc; do
      mountpoint -q "$ROOT/$m" && umount -l "$ROOT/$m"
    done
  fi
  if [ "$KEEP" = 1 ]; then echo "package_test.sh: kept $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. Build the packages ---------------------------------------------------------
step "build the packages ($BUILD, prefix /usr)"
GEN=()
if command -v ninja >/dev/null && [ ! -f "$BUILD/Makefile" ]; then GEN=(-G Ninja); fi
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DRELAXPS_BUILD_TESTS=OFF -DRELAXPS_BUILD_BENCH=OFF >"$WORK/configure.log" 2>&1 ||
  { cat "$WORK/configure.log"; fail "configure"; }
nice cmake --build "$BUILD" -j "$JOBS" >"$WORK/build.log" 2>&1 ||
  { tail -n 40 "$WORK/build.log"; fail "build"; }
(cd "$BUILD" && cpack -G DEB -B "$WORK/cpack" >"$WORK/cpack.log" 2>&1) ||
  { cat "$WORK/cpack.log"; fail "cpack"; }
mkdir -p "$WORK/debs"
mv "$WORK"/cpack/*.deb "$WORK/debs/"
for deb in "$WORK"/debs/*.deb; do
  echo "$(basename "$deb")"
  dpkg-deb -f "$deb" Depends | sed 's/^/    Depends: /'
done

step "lintian"
# Errors and warnings fail; the overrides shipped in the packages
# (packaging/lintian/) say why each overridden tag is right for them.
lintian --tag-display-limit 0 --display-level '>=warning' --show-overrides "$WORK"/debs/*.deb \
  >"$WORK/lintian.txt" 2>&1 || true
grep -E '^[EWO]: ' "$WORK/lintian.txt" || true
if grep -qE '^[EW]: ' "$WORK/lintian.txt"; then fail "lintian reported the errors or warnings above"; fi
echo "lintian: no errors or warnings ($(grep -c '^O: ' "$WORK/lintian.txt" || true) tags overridden, each with its reason)"

# ---- 2. A clean Debian --------------------------------------------------------------
SOURCES=/etc/apt/sources.list.d/debian.sources
MIRROR=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$SOURCES" 2>/dev/null || true)
SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
step "debootstrap --variant=minbase $SUITE from $MIRROR"
mkdir -p /var/cache/relaxps-package-test
# (--cache-dir keeps the downloaded .debs for the next run; the root itself
# is made from scratch every time.)
debootstrap --variant=minbase --cache-dir=/var/cache/relaxps-package-test "$SUITE" "$ROOT" \
  "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || { tail -n 30 "$WORK/debootstrap.log"; fail "debootstrap"; }
# The same mirrors as this machine (updates and security too): the packages
# were built against its libraries, whose versions their Depends name.
if [ -f "$SOURCES" ]; then
  rm -f "$ROOT/etc/apt/sources.list"
  cp "$SOURCES" "$ROOT/etc/apt/sources.list.d/"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mount -t proc proc "$ROOT/proc"
mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"
cp "$WORK"/debs/*.deb "$ROOT/tmp/"
in_root apt-get update -q >"$WORK/apt-update.log" 2>&1 || { cat "$WORK/apt-update.log"; fail "apt-get update"; }
SERVER_SIDE='rocksdb|glog|gflags|openblas|zookeeper|httplib'
show_no_server_libs() {
  echo "\$ dpkg -l | grep -Ei '$SERVER_SIDE'"
  if in_root dpkg -l | grep -Ei "$SERVER_SIDE"; then fail "$1 pulled a server-side library (above)"; fi
  echo "(nothing: $1 pulled none of RocksDB, glog, gflags, OpenBLAS, ZooKeeper, cpp-httplib)"
}
apt_install() {
  echo "\$ apt-get install $*"
  in_root sh -c "cd /tmp && apt-get install -y --no-install-recommends $*" >"$WORK/apt.log" 2>&1 ||
    { tail -n 30 "$WORK/apt.log"; fail "apt-get install $*"; }
  grep -E '^(Setting up|The following NEW)' "$WORK/apt.log" | grep -c '^Setting up' |
    sed 's/^/  packages set up: /'
}

# ---- 2a. Client only ------------------------------------------------------------------
step "client only: librelaxps-client, librelaxps-client-dev, and build tools"
apt_install ./librelaxps-client_*.deb ./librelaxps-client-dev_*.deb g++ cmake make pkgconf
echo "\$ dpkg -l | grep -E 'relaxps|libzmq|libprotobuf'"
in_root dpkg -l | grep -E 'relaxps|libzmq|libprotobuf' | awk '{print "  " $1, $2, $3}'
show_no_server_libs "the client packages"

step "python3-relaxps"
apt_install ./python3-relaxps_*.deb
in_root dpkg -l | grep -E 'python3-relaxps|python3-numpy ' | awk '{print "  " $1, $2, $3}'
show_no_server_libs "python3-relaxps"

# ---- 2b. Build the trainers from the installed client packages ---------------------------
step "build trainers against the installed packages"
mkdir -p "$ROOT/src/examples"
cp "$SRC/examples/CMakeLists.txt" "$SRC/examples/linear_trainer.cc" "$ROOT/src/examples/"
in_root sh -c 'cmake -S /src/examples -B /src/build -DCMAKE_BUILD_TYPE=Release >/src/cmake.log 2>&1 &&
  cmake --build /src/build >>/src/cmake.log 2>&1' || { cat "$ROOT/src/cmake.log"; fail "find_package build"; }
echo "find_package(relaxps COMPONENTS client): built /src/build/linear_trainer"
echo "\$ pkg-config --cflags --libs relaxps"
in_root pkg-config --cflags --libs relaxps | sed 's/^/  /'
in_root sh -c 'g++ -std=c++17 -Wall -Wextra -Werror /src/examples/linear_trainer.cc -o /src/pc_trainer \
  $(pkg-config --cflags --libs relaxps)' || fail "pkg-config build"
echo "pkg-config relaxps: built /src/pc_trainer"
for t in /src/build/linear_trainer /src/pc_trainer; do
  in_root ldd "$t" >"$WORK/ldd.txt"
  grep -q librelaxps_client "$WORK/ldd.txt" || fail "$t does not link librelaxps_client"
  if grep -Ei "$SERVER_SIDE|not found" "$WORK/ldd.txt"; then fail "$t: bad link (above)"; fi
done

# ---- 2c. The server package, a job, three trainers -------------------------------------
step "relaxps-server$( ls "$ROOT"/tmp/relaxps-cuda_*.deb >/dev/null 2>&1 && echo ' and relaxps-cuda')"
DEBS="./relaxps-server_*.deb"
ls "$ROOT"/tmp/relaxps-cuda_*.deb >/dev/null 2>&1 && DEBS="$DEBS ./relaxps-cuda_*.deb"
apt_install $DEBS
in_root dpkg -l | grep -E 'relaxps|librocksdb|libgoogle-glog|libgflags|libopenblas|libzookeeper' |
  awk '{print "  " $1, $2, $3}'
in_root sh -c 'relaxps-coordinator --endpoint_file=/tmp/coord --num_servers=1 >/tmp/coord.log 2>&1 &'
for _ in $(seq 1 100); do [ -s "$ROOT/tmp/coord" ] && break; sleep 0.1; done
[ -s "$ROOT/tmp/coord" ] || { cat "$ROOT/tmp/coord.log"; fail "coordinator did not start"; }
COORD=$(cat "$ROOT/tmp/coord")
in_root sh -c "relaxps-server --coordinator=$COORD >/tmp/server.log 2>&1 &"
echo "job: /usr/bin/relaxps-coordinator at $COORD, one /usr/bin/relaxps-server"
cat >"$ROOT/src/trainer.py" <<'EOF'
# A least-squares trainer on the installed Python package: w -> target.
import sys

import numpy as np
import relaxps

target = np.arange(64, dtype=np.float32) % 5
with relaxps.Client(sys.argv[1]) as client:
    client.create_table("py_w", 64, optimizer="sgd", lr=0.2)
    w = np.zeros(64, np.float32)
    client.pull("py_w", w)
    first = float(np.square(w - target).mean())
    for _ in range(60):
        client.push_pull("py_w", w - target, w)
        client.clock()
    last = float(np.square(w - target).mean())
print(f"python trainer: relaxps {relaxps.__file__}, loss {first:.4f} -> {last:.6f}")
sys.exit(0 if last < first * 1e-3 else 1)
EOF
in_root /src/build/linear_trainer "$COORD" 300 >"$WORK/t1.log" 2>&1 &
T1=$!
in_root /src/pc_trainer "$COORD" 300 >"$WORK/t2.log" 2>&1 &
T2=$!
in_root /usr/bin/python3 /src/trainer.py "$COORD" >"$WORK/t3.log" 2>&1 &
T3=$!
rc=0
wait $T1 || rc=1; echo "find_package trainer (exit $rc):"; tail -n 2 "$WORK/t1.log" | sed 's/^/  /'
[ $rc = 0 ] || fail "find_package trainer"
wait $T2 || rc=1; echo "pkg-config trainer (exit $rc):"; tail -n 2 "$WORK/t2.log" | sed 's/^/  /'
[ $rc = 0 ] || fail "pkg-config trainer"
wait $T3 || rc=1; echo "python trainer (exit $rc):"; tail -n 2 "$WORK/t3.log" | sed 's/^/  /'
[ $rc = 0 ] || fail "python trainer"
echo "\$ python3 -c 'import relaxps' (in the root)"
in_root /usr/bin/python3 -c 'import relaxps; print("  import relaxps:", relaxps.__file__)'

if ls "$ROOT"/tmp/relaxps-cuda_*.deb >/dev/null 2>&1; then
  step "relaxps-cuda without NVIDIA's libraries"
  out=$(in_root relaxps-worker --device=cuda --coordinator="$COORD" 2>&1) &&
    fail "relaxps-worker --device=cuda succeeded without CUDA libraries"
  echo "$out" | grep -m1 "CUDA" | sed 's/^/  /'
  grep -q "cannot be loaded: libcu" <<<"$out" || fail "no clear error for the missing CUDA libraries"
fi
step "PASS (${SECONDS} s)"
