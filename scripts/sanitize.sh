#!/usr/bin/env bash
# Sanitizer and fuzzer runs, each in its own build folder.
#   scripts/sanitize.sh asan-subset   ASan + UBSan over the unit tests of the
#       code that reads untrusted bytes and moves them (wire parsing, request
#       codec, shard maps, the transport, shards and their gate), building only
#       those tests' targets into build-asan-subset/. CI runs this (about 10
#       minutes with its build on 2 cores).
#   scripts/sanitize.sh asan          the whole suite under ASan + UBSan
#       (build-asan/; the build alone takes about 16 minutes on 2 cores).
#   scripts/sanitize.sh tsan [REGEX]  ThreadSanitizer (build-tsan/) over the
#       whole suite, or over the tests matching REGEX.
#   scripts/sanitize.sh fuzz [RUNS]   every libFuzzer target of tests/fuzz
#       for RUNS inputs each (default 2000000; scripts/fuzz.sh, build-fuzz/).
# Any process that writes a sanitizer report fails the run: reports go to
# <build>/sanitizer-logs/ and are printed at the end (cmake/Sanitizers.cmake).
# Environment: JOBS (build jobs, default nproc), CTEST_JOBS (default 2).
# Run the by-hand modes under `nice` on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# The asan-subset: the test binaries to build. Their tests are selected by
# the suites each binary lists (gtest_discover_tests names tests Suite.Test),
# plus fuzz.* (the fuzz targets replay their corpora under the same
# sanitizers).
SUBSET_TESTS=(wire_test shard_map_test transport_test socket_poller_test loop_client_test
              buffer_pool_test consistency_gate_test dense_shard_test sparse_shard_test
              applied_ledger_test row_index_test parked_requests_test unread_replies_test
              log_limiter_test)
SUBSET_FUZZERS=(request_codec_fuzzer shard_map_fuzzer store_format_fuzzer
                checkpoint_manifest_fuzzer)

# subset_regex BUILD_DIR: the ctest regex of the subset's tests.
subset_regex() {
  local dir=$1 suites=() t bin
  for t in "${SUBSET_TESTS[@]}"; do
    bin=$(find "$dir/bin" "$dir/tests" -name "$t" -type f -perm -u+x 2>/dev/null | head -n 1)
    [ -n "$bin" ] || { echo "sanitize.sh: $t was not built" >&2; exit 1; }
    # Suite lines end in '.'; parameterized ones carry a prefix/ and a comment.
    mapfile -t -O "${#suites[@]}" suites < <(ASAN_OPTIONS=detect_leaks=0 "$bin" --gtest_list_tests |
                                              sed -n 's/^\([A-Za-z0-9_/]*\)\..*$/\1/p')
  done
  local IFS='|'
  echo "^(${suites[*]})\\.|^fuzz\\."
}

# run_ctest BUILD_DIR [ctest args...]: runs ctest, then fails on any report.
run_ctest() {
  local dir=$1
  shift
  local reports=$dir/sanitizer-logs
  mkdir -p "$reports"
  rm -f "$reports"/report.*
  local status=0
  (cd "$dir" && ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600 "$@") || status=$?
  shopt -s nullglob
  local found=("$reports"/report.*)
  if [ ${#found[@]} -gt 0 ]; then
    for r in "${found[@]}"; do echo "==== $r"; cat "$r"; done
    echo "sanitize.sh: ${#found[@]} sanitizer report(s) in $reports" >&2
    status=1
  fi
  return $status
}

configure() {
  local dir=$1 sanitizer=$2
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DRELAXPS_SANITIZER="$sanitizer" -DRELAXPS_BUILD_BENCH=OFF -DRELAXPS_WITH_CUDA=OFF
  fi
}

MODE=${1:-}
[ -n "$MODE" ] || usage
shift
case "$MODE" in
  asan-subset)
    scripts/install_deps.sh
    DIR=${BUILD_DIR:-build-asan-subset}
    configure "$DIR" address,undefined
    start=$(date +%s)
    cmake --build "$DIR" -j "${JOBS:-$(nproc)}" --target "${SUBSET_TESTS[@]}" "${SUBSET_FUZZERS[@]}"
    built=$(date +%s)
    regex=$(subset_regex "$DIR")
    status=0
    run_ctest "$DIR" -R "$regex" --no-tests=error "$@" || status=$?
    end=$(date +%s)
    count=$(cd "$DIR" && ctest -N -R "$regex" | sed -n 's/^Total Tests: //p')
    echo "sanitize.sh asan-subset: ${count} tests, build $((built - start)) s, tests" \
         "$((end - built)) s, status $status"
    exit $status
    ;;
  asan)
    exec scripts/test.sh --sanitize=address,undefined "$@"
    ;;
  tsan)
    if [ $# -gt 0 ]; then
      exec scripts/test.sh --sanitize=thread -R "$1" "${@:2}"
    fi
    exec scripts/test.sh --sanitize=thread
    ;;
  fuzz)
    exec scripts/fuzz.sh --runs="${1:-2000000}" "${@:2}"
    ;;
  *) usage ;;
esac
