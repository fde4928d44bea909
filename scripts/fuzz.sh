#!/usr/bin/env bash
# Fuzzes the libFuzzer targets of tests/fuzz for real and adds the inputs
# that reach new code to their corpora (tests/fuzz/<target>/); commit those.
#   scripts/fuzz.sh --seconds=N [--target=T]... [--runs=R] [libFuzzer flags]
#     --seconds=N  fuzz each target for N seconds (default 60)
#     --runs=R     stop each target after R inputs instead (e.g. 2000000)
#     --target=T   only T (request_codec, shard_map, store_format,
#                  checkpoint_manifest); repeat for several; default all
#     -flag=value  any other argument goes to libFuzzer
# Builds with clang-14 (ASan + UBSan + libFuzzer) into build-fuzz/. Per
# target it fuzzes from a copy of the corpus, then merges (-merge=1
# -use_counters=0) only the new inputs that reach new code edges (hit
# counts do not earn a file, which keeps the corpus small), and prints
# "<target>: N inputs in S s".
# A finding (crash, sanitizer report, FUZZ_CHECK, leak, timeout) stops the
# script with a non-zero status; the input is in build-fuzz/findings/<target>/.
# Run it under `nice -n 10` on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=60
RUNS=""
TARGETS=()
FUZZER_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --seconds=*) SECONDS_PER_TARGET=${arg#--seconds=} ;;
    --runs=*) RUNS=${arg#--runs=} ;;
    --target=*) TARGETS+=("${arg#--target=}") ;;
    *) FUZZER_ARGS+=("$arg") ;;
  esac
done
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(request_codec shard_map store_format checkpoint_manifest)
fi

BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
scripts/install_deps.sh
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  GEN=()
  if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRELAXPS_FUZZ=ON -DRELAXPS_SANITIZER=address,undefined \
    -DRELAXPS_BUILD_BENCH=OFF -DRELAXPS_WITH_CUDA=OFF
fi
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]/%/_fuzzer}"

LIMIT=(-max_total_time="$SECONDS_PER_TARGET")
if [ -n "$RUNS" ]; then LIMIT=(-runs="$RUNS"); fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "${TARGETS[@]}"; do
  corpus=tests/fuzz/$t
  bin=$BUILD/bin/${t}_fuzzer
  work=$BUILD/fuzz-work/$t
  findings=$BUILD/findings/$t
  rm -rf "$work" && mkdir -p "$work" "$findings"
  cp "$corpus"/* "$work"/
  log=$BUILD/fuzz-$t.log
  start=$(date +%s)
  if ! "$bin" "${LIMIT[@]}" -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$findings/" "${FUZZER_ARGS[@]}" "$work" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz.sh: $t: FINDING, see $log and $findings/" >&2
    exit 1
  fi
  secs=$(( $(date +%s) - start ))
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
  before=$(ls "$corpus" | wc -l)
  "$bin" -merge=1 -use_counters=0 "$corpus" "$work" >>"$log" 2>&1
  after=$(ls "$corpus" | wc -l)
  echo "$t: $runs inputs in ${secs} s, corpus $before -> $after files (log $log)"
done
