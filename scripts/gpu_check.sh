#!/usr/bin/env bash
# GPU check for relaxps: builds with the CUDA back end into build-gpu, runs
# the CUDA-vs-CPU kernel tests, the optimizer benchmark on the GPU, and (when
# the worker binary exists) a CNN training-throughput comparison of
# --device=cuda against --device=cpu.
#
# Usage: scripts/gpu_check.sh            (from anywhere; ~3-6 minutes)
# Env:   BUILD_DIR (default build-gpu), WORKER_DURATION_S (default 20).
# Exit status: non-zero if the build or the CUDA tests fail, or if a GPU is
# visible but the CUDA tests skipped themselves.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
WORKER_DURATION_S=${WORKER_DURATION_S:-20}
JOBS=$(nproc)
BIN="$BUILD_DIR/bin"
START=$SECONDS

step() { echo; echo "=== [$((SECONDS - START))s] $*"; }

step "GPU"
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L; then
  HAVE_GPU=1
else
  echo "nvidia-smi found no GPU; the CUDA tests are expected to skip"
fi

step "configure ($BUILD_DIR, RELAXPS_WITH_CUDA=ON)"
GENERATOR=()
if command -v ninja >/dev/null 2>&1; then GENERATOR=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DRELAXPS_WITH_CUDA=ON

step "build kernels, kernel tests, optimizer benchmark (-j$JOBS)"
timeout 300 cmake --build "$BUILD_DIR" -j "$JOBS" --target \
  relaxps_kernels device_cpu_test optimizer_test device_cuda_test relaxps-bench-optimizer

step "build relaxps-worker (optional)"
if ! timeout 240 cmake --build "$BUILD_DIR" -j "$JOBS" --target relaxps-worker >"$BUILD_DIR/worker_build.log" 2>&1; then
  echo "relaxps-worker did not build (see $BUILD_DIR/worker_build.log); skipping the worker comparison"
  tail -5 "$BUILD_DIR/worker_build.log" || true
fi

step "CUDA kernel tests (device_cuda_test)"
set +e
timeout 180 "$BIN/device_cuda_test" 2>&1 | tee "$BUILD_DIR/device_cuda_test.log"
TEST_RC=${PIPESTATUS[0]}
set -e
if [[ $TEST_RC -ne 0 ]]; then
  echo "FAIL: device_cuda_test exited with $TEST_RC"
  exit 1
fi
if [[ $HAVE_GPU -eq 1 ]] && grep -q "SKIPPED.*CudaVsCpuTest" "$BUILD_DIR/device_cuda_test.log"; then
  echo "FAIL: a GPU is visible but the CUDA tests skipped themselves"
  exit 1
fi

step "CPU kernel tests (sanity, same build)"
timeout 120 "$BIN/device_cpu_test" --gtest_brief=1
timeout 60 "$BIN/optimizer_test" --gtest_brief=1

step "optimizer benchmark"
if [[ $HAVE_GPU -eq 1 ]]; then
  timeout 120 "$BIN/relaxps-bench-optimizer" --device=cuda --iters=50 --reps=5
fi
timeout 120 "$BIN/relaxps-bench-optimizer" --device=cpu --iters=5 --reps=3

if [[ -x "$BIN/relaxps-worker" ]]; then
  for device in cuda cpu; do
    if [[ $device == cuda && $HAVE_GPU -eq 0 ]]; then continue; fi
    step "relaxps-worker --device=$device (${WORKER_DURATION_S}s)"
    set +e
    timeout $((WORKER_DURATION_S + 60)) "$BIN/relaxps-worker" --local --model=cnn \
      --duration_s="$WORKER_DURATION_S" --device="$device" >"$BUILD_DIR/worker_$device.log" 2>&1
    echo "exit status $?"
    set -e
    grep -iE "samples(/|_per_)s" "$BUILD_DIR/worker_$device.log" | tail -3 || tail -5 "$BUILD_DIR/worker_$device.log"
  done
else
  step "relaxps-worker not found in $BIN; skipping the training comparison"
fi

step "done in $((SECONDS - START))s"
