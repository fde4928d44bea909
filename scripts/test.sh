#!/usr/bin/env bash
# Installs what is missing, builds (Release, tests on) and runs the whole
# test suite with CTest.
#
# Usage: scripts/test.sh [--clang-tsa] [ctest arguments...]
#   --clang-tsa  instead of testing: build the libraries and binaries with
#                clang-14 -Wthread-safety -Werror into build-tsa/ (the
#                GUARDED_BY / REQUIRES annotations of common/thread_annotations.h
#                are checked); fails on any warning.
#   anything else is passed to ctest (e.g. -R server).
set -euo pipefail
cd "$(dirname "$0")/.."

clang_tsa=0
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --clang-tsa) clang_tsa=1 ;;
    *) ctest_args+=("$1") ;;
  esac
  shift
done

scripts/install_deps.sh

if [ "$clang_tsa" -eq 1 ]; then
  BUILD_DIR=${TSA_BUILD_DIR:-build-tsa}
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DRELAXPS_THREAD_SAFETY_ANALYSIS=ON -DRELAXPS_BUILD_TESTS=OFF -DRELAXPS_BUILD_BENCH=OFF \
      -DRELAXPS_WITH_CUDA=OFF
  fi
  cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
  echo "test.sh --clang-tsa: built warning-free with clang-14 -Wthread-safety -Werror"
  exit 0
fi

scripts/build.sh
cd "${BUILD_DIR:-build}"
# Two jobs: the multi-process tests each start a small cluster on 127.0.0.1.
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600 "${ctest_args[@]+"${ctest_args[@]}"}"
