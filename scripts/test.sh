#!/usr/bin/env bash
# Installs what is missing, builds and runs the whole test suite with CTest.
#   scripts/test.sh                               Release build in build/
#   scripts/test.sh --sanitize=address,undefined  ASan + UBSan build in build-asan/
#   scripts/test.sh --sanitize=thread             TSan build in build-tsan/
#   scripts/test.sh --asan-subset                 after the Release suite: ASan +
#       UBSan over the parsing/wire/shard/transport unit tests, building only
#       their targets in build-asan-subset/ (scripts/sanitize.sh asan-subset)
#   scripts/test.sh --clang-tsa                   instead of testing: build the
#       libraries and binaries with clang-14 -Wthread-safety -Werror into
#       build-tsa/ (the GUARDED_BY / REQUIRES annotations of
#       common/thread_annotations.h are checked); fails on any warning.
# Any other argument goes to ctest (e.g. -R server). Sanitized runs fail if
# any process (tests and the binaries they start) wrote a sanitizer report
# to <build>/sanitizer-logs/; see README "Sanitizers and fuzzers".
# Environment: BUILD_DIR (overrides the folder), CTEST_JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

SANITIZE=""
CLANG_TSA=0
ASAN_SUBSET=0
CTEST_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --sanitize=*) SANITIZE=${arg#--sanitize=} ;;
    --clang-tsa) CLANG_TSA=1 ;;
    --asan-subset) ASAN_SUBSET=1 ;;
    *) CTEST_ARGS+=("$arg") ;;
  esac
done

scripts/install_deps.sh

if [ "$CLANG_TSA" -eq 1 ]; then
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

CMAKE_ARGS=()
if [ -n "$SANITIZE" ]; then
  case "$SANITIZE" in
    thread) DEFAULT_DIR=build-tsan ;;
    *address*) DEFAULT_DIR=build-asan ;;
    *) DEFAULT_DIR=build-${SANITIZE//,/-} ;;
  esac
  BUILD_DIR=${BUILD_DIR:-$DEFAULT_DIR}
  # Debug info for readable reports; no benchmarks; CPU back end only (the
  # CUDA runtime does not run under ASan/TSan without special options).
  CMAKE_ARGS=(-DRELAXPS_SANITIZER="$SANITIZE" -DCMAKE_BUILD_TYPE=RelWithDebInfo
              -DRELAXPS_BUILD_BENCH=OFF -DRELAXPS_WITH_CUDA=OFF)
fi
export BUILD_DIR=${BUILD_DIR:-build}

scripts/build.sh "${CMAKE_ARGS[@]+"${CMAKE_ARGS[@]}"}"
ROOT=$(pwd)
cd "$BUILD_DIR"
REPORTS=sanitizer-logs
if [ -n "$SANITIZE" ]; then mkdir -p "$REPORTS" && rm -f "$REPORTS"/report.*; fi
status=0
# Two jobs: the multi-process tests each start a small cluster on 127.0.0.1.
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600 \
  "${CTEST_ARGS[@]+"${CTEST_ARGS[@]}"}" || status=$?
# A failed test runs once more, alone (RELAXPS_TEST_RERUN=0: never). The
# multi-process tests wait on real time, and on a loaded machine a deadline
# can pass that never passes on a quiet one; a test that fails twice fails
# the run, one that passes alone is named FLAKY here so it gets looked at.
if [ "$status" -ne 0 ] && [ "${RELAXPS_TEST_RERUN:-1}" != 0 ] && [ -z "$SANITIZE" ] &&
   [ -s Testing/Temporary/LastTestsFailed.log ]; then
  cp Testing/Temporary/LastTestsFailed.log first_failures.log
  echo "test.sh: running the failed test(s) again, one at a time:"
  sed 's/^/  /' first_failures.log
  status=0
  ctest --output-on-failure -j 1 --timeout 600 --rerun-failed || status=$?
  if [ "$status" -eq 0 ]; then
    sed 's/^[0-9]*:/FLAKY (failed, then passed alone): /' first_failures.log
  fi
fi
if [ -n "$SANITIZE" ]; then
  shopt -s nullglob
  reports=("$REPORTS"/report.*)
  if [ ${#reports[@]} -gt 0 ]; then
    for r in "${reports[@]}"; do echo "==== $BUILD_DIR/$r"; cat "$r"; done
    echo "test.sh: ${#reports[@]} sanitizer report(s) in $BUILD_DIR/$REPORTS" >&2
    status=1
  else
    echo "test.sh: no sanitizer report ($SANITIZE)"
  fi
fi
if [ "$ASAN_SUBSET" -eq 1 ]; then
  (cd "$ROOT" && scripts/sanitize.sh asan-subset) || status=1
fi
exit $status
