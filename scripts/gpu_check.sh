#!/usr/bin/env bash
# GPU check for relaxps. Three modes:
#
#   scripts/gpu_check.sh                  build with the CUDA back end into
#       build-gpu here and run the checks below (a machine with Debian's
#       packages and a GPU; ~3-6 minutes).
#   scripts/gpu_check.sh --bundle[=DIR]   on this machine (no GPU needed):
#       build (BUILD_DIR, default build; CUDA AUTO builds the plug-in when
#       nvcc is here) and pack into DIR (default build-gpu-bundle, git-ignored)
#       everything a machine with CUDA but without Debian's packages or a
#       network needs: the binaries, the CUDA plug-in (lib/, found as
#       bin/../lib), every shared library from ldd that is neither glibc nor
#       CUDA (xz-compressed in relaxps.tar.xz), a subset of Fashion-MNIST
#       (data/), bench/cluster_lib.sh and this script. Fails if DIR is not
#       well under the 64 MiB a device run carries.
#   DIR/gpu_check.sh --run [--device=cuda|cpu]   there (or
#       scripts/gpu_check.sh --run=DIR): unpacks into a temporary folder,
#       sets LD_LIBRARY_PATH to its lib/ (nothing else from the host but
#       glibc and CUDA) and runs, capped at 6 minutes (RUN_BUDGET_S): the
#       CUDA-vs-CPU kernel tests, the optimizer benchmark (GPU Adam against
#       a device memcpy, target >= 0.8x), the cnn trainer with --device=cuda
#       against --device=cpu, and a 2x2 cluster (chain replication, 2
#       servers, 2 workers on the device) in which server 1 is killed and
#       the chains fail over. --device=cpu runs every step on the CPU (the
#       check of the bundle on a machine without a GPU). Prints one
#       `result NAME=VALUE` line per figure and `gpu_check: PASS|FAIL`.
#
# Env:   BUILD_DIR, WORKER_DURATION_S (default 20; --run: 15), RUN_BUDGET_S (360).
# Exit status: non-zero if a build, the bundle or a check fails, or if a GPU
# is visible but the CUDA tests skipped themselves.
set -euo pipefail

SCRIPT=$(readlink -f "$0")
MODE=build
BUNDLE_DIR=""
RUN_DEVICE=cuda
for arg in "$@"; do
  case "$arg" in
    --bundle) MODE=bundle ;;
    --bundle=*) MODE=bundle; BUNDLE_DIR=${arg#*=} ;;
    --run) MODE=run ;;
    --run=*) MODE=run; BUNDLE_DIR=${arg#*=} ;;
    --device=cuda|--device=cpu) RUN_DEVICE=${arg#*=} ;;
    -h|--help) sed -n '2,30p' "$SCRIPT" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# ---- --bundle ---------------------------------------------------------------
# Binaries the checks run (bin/) and the plug-in (lib/).
BUNDLE_BINS=(device_cuda_test device_cpu_test optimizer_test relaxps-bench-optimizer
             relaxps-worker relaxps-server relaxps-coordinator relaxps-ctl)
# glibc's own libraries and the CUDA libraries come from the machine.
is_host_lib() {
  case "$(basename "$1")" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|\
    libutil.so*|libanl.so*|libnsl.so*|libmvec.so*|libBrokenLocale.so*|\
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnvidia*|libnvrtc*|libnvJitLink*)
      return 0 ;;
  esac
  case "$1" in /usr/local/cuda*|*/cuda/lib*|*/cuda-*/*) return 0 ;; esac
  return 1
}

make_bundle() {
  local root; root=$(cd "$(dirname "$SCRIPT")/.." && pwd)
  local build=${BUILD_DIR:-build}
  case "$build" in /*) ;; *) build="$root/$build" ;; esac
  local out=${BUNDLE_DIR:-$root/build-gpu-bundle}
  case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
  echo "gpu_check --bundle: building in $build"
  if [ ! -f "$build/build.ninja" ]; then
    BUILD_DIR=$build JOBS=${JOBS:-2} "$root/scripts/build.sh" >/dev/null || return 1
  fi
  nice ninja -C "$build" "${BUNDLE_BINS[@]}" >/dev/null || { echo "build failed"; return 1; }
  local plugin="$build/lib/librelaxps_kernels_cuda.so"
  [ -f "$plugin" ] || echo "gpu_check --bundle: WARNING: no CUDA plug-in in $build/lib (built without nvcc?); the bundle can run --device=cpu only"
  local stage; stage=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-bundle.XXXXXX")
  mkdir -p "$stage/relaxps/bin" "$stage/relaxps/lib"
  local b
  for b in "${BUNDLE_BINS[@]}"; do cp "$build/bin/$b" "$stage/relaxps/bin/"; done
  [ -f "$plugin" ] && cp "$plugin" "$stage/relaxps/lib/"
  # Every non-glibc, non-CUDA library any of them loads.
  local lib
  while read -r lib; do
    is_host_lib "$lib" && continue
    cp -L "$lib" "$stage/relaxps/lib/"
  done < <(for f in "$stage"/relaxps/bin/* "$stage"/relaxps/lib/*.so; do
             ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
           done | sort -u)
  strip --strip-unneeded "$stage"/relaxps/bin/* "$stage"/relaxps/lib/* 2>/dev/null || true
  rm -rf "$out"
  mkdir -p "$out/data" "$out/bench"
  tar -C "$stage" -cf - relaxps | xz -T2 -6 >"$out/relaxps.tar.xz"
  rm -rf "$stage"
  cp "$SCRIPT" "$out/gpu_check.sh"
  cp "$root/bench/cluster_lib.sh" "$out/bench/"
  # Fashion-MNIST: the first 12000 training and 2000 test examples, in the
  # same idx format (the count in each header rewritten).
  /usr/bin/python3 - "${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" "$out/data" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, keep in (("train-images-idx3-ubyte", 12000), ("train-labels-idx1-ubyte", 12000),
                   ("t10k-images-idx3-ubyte", 2000), ("t10k-labels-idx1-ubyte", 2000)):
    with gzip.open(f"{src}/{name}.gz", "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    header = 4 * (1 + dims)
    item = 1
    for d in struct.unpack(">" + "I" * (dims - 1), data[8:header]):
        item *= d
    out = data[:4] + struct.pack(">I", keep) + data[8:header] + data[header:header + keep * item]
    with gzip.open(f"{dst}/{name}.gz", "wb", compresslevel=9) as f:
        f.write(out)
PY
  local kb; kb=$(du -sk "$out" | cut -f1)
  echo "gpu_check --bundle: $out: $((kb / 1024)) MiB ($kb KiB): relaxps.tar.xz $(du -k "$out/relaxps.tar.xz" | cut -f1) KiB, data $(du -sk "$out/data" | cut -f1) KiB; libraries: $(tar -tJf "$out/relaxps.tar.xz" | grep -c '^relaxps/lib/.')"
  if [ "$kb" -gt $((48 * 1024)) ]; then
    echo "gpu_check --bundle: FAIL: $kb KiB is not well under 64 MiB"
    return 1
  fi
  echo "run it there: $(basename "$out")/gpu_check.sh --run   (here, on the CPU: $out/gpu_check.sh --run --device=cpu)"
}

# ---- --run ------------------------------------------------------------------
run_bundle() {
  # Failures are counted, not fatal: every check runs and reports.
  set +e
  local dir=${BUNDLE_DIR:-$(dirname "$SCRIPT")}
  dir=$(cd "$dir" && pwd)
  [ -f "$dir/relaxps.tar.xz" ] || { echo "gpu_check --run: no relaxps.tar.xz in $dir (make it with --bundle)"; return 2; }
  local budget=${RUN_BUDGET_S:-360} start=$SECONDS
  # Global: the EXIT trap runs after this function's locals are gone.
  work=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-gpu-run.XXXXXX")
  local failed=0
  # EXIT, not RETURN: a RETURN trap would also fire when step() returns or
  # cluster_lib.sh has been sourced.
  trap 'cluster_stop 2>/dev/null; rm -rf "$work"' EXIT
  exec 3>&1  # step() headers reach the terminal even when a step's output is redirected.
  xz -dc "$dir/relaxps.tar.xz" | tar -C "$work" -xf -
  BIN="$work/relaxps/bin"
  export LD_LIBRARY_PATH="$work/relaxps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local data="$dir/data" duration=${WORKER_DURATION_S:-15}
  left() { echo $(( budget - (SECONDS - start) )); }
  # step TIMEOUT_S NAME CMD...: runs CMD within min(TIMEOUT_S, what is left).
  step() {
    local t=$1 name=$2; shift 2
    local l; l=$(left)
    [ "$t" -gt "$l" ] && t=$l
    echo >&3; echo "=== [$((SECONDS - start))s] $name" >&3
    if [ "$t" -le 5 ]; then echo "skipped: the ${budget}s budget is spent" >&3; failed=1; return 1; fi
    timeout "$t" "$@"
  }
  local have_gpu=0
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L; then have_gpu=1; fi
  echo "gpu_check --run: $dir, device $RUN_DEVICE, GPU visible: $have_gpu, libraries from $work/relaxps/lib"
  if [ "$RUN_DEVICE" = cuda ] && [ $have_gpu = 0 ]; then
    echo "gpu_check --run: --device=cuda but no GPU is visible (use --device=cpu to check the bundle)"
    return 1
  fi
  # Nothing may come from the host but glibc and CUDA.
  local missing
  missing=$(for f in "$BIN"/* "$work"/relaxps/lib/*.so; do ldd "$f" 2>/dev/null; done | grep "not found" | sort -u || true)
  if [ -n "$missing" ]; then echo "FAIL: unresolved libraries:"; echo "$missing"; failed=1; fi

  # 1. Kernels: CUDA against CPU (skip themselves without a GPU), CPU alone.
  if step 120 "CUDA-vs-CPU kernel tests (device_cuda_test)" "$BIN/device_cuda_test" --gtest_brief=1 >"$work/cuda_test.log" 2>&1; then
    tail -n 3 "$work/cuda_test.log"
    if [ $have_gpu = 1 ] && grep -q "SKIPPED" "$work/cuda_test.log"; then
      echo "FAIL: a GPU is visible but CUDA tests skipped themselves"; failed=1
    fi
    echo "result cuda_kernel_tests=$([ $have_gpu = 1 ] && echo passed || echo skipped_no_gpu)"
  else
    tail -n 20 "$work/cuda_test.log"; echo "result cuda_kernel_tests=FAILED"; failed=1
  fi
  step 60 "CPU kernel tests" "$BIN/device_cpu_test" --gtest_brief=1 >"$work/cpu_test.log" 2>&1 &&
    step 60 "optimizer tests" "$BIN/optimizer_test" --gtest_brief=1 >>"$work/cpu_test.log" 2>&1 ||
    { tail -n 20 "$work/cpu_test.log"; failed=1; }

  # 2. Optimizer bench: Adam on the device against a device memcpy.
  if step 90 "optimizer benchmark (--device=$RUN_DEVICE)" "$BIN/relaxps-bench-optimizer" \
      --device="$RUN_DEVICE" --iters=$([ "$RUN_DEVICE" = cuda ] && echo 50 || echo 3) --reps=3 \
      >"$work/optimizer.json" 2>"$work/optimizer.log"; then
    /usr/bin/python3 - "$work/optimizer.json" "$RUN_DEVICE" <<'PY' || failed=1
import json, sys
doc = json.loads([l for l in open(sys.argv[1]) if l.strip().startswith("{")][-1])
dev = sys.argv[2]
memcpy = doc.get("memcpy_d2d_gbps")
for r in doc.get("optimizer_update", []):
    if r["name"].startswith("adam"):
        ratio = r["gbps"] / memcpy if memcpy else None
        print(f"result optimizer_{dev}_{r['name']}_gbps={r['gbps']:.2f}"
              + (f" memcpy_gbps={memcpy:.2f} ratio={ratio:.3f} (target >= 0.8 on a GPU: "
                 f"{'MET' if ratio >= 0.8 else 'MISS'})" if ratio else " (no memcpy yardstick)"))
PY
  else
    tail -n 10 "$work/optimizer.log"; failed=1
  fi

  # 3. cnn trainer, the device against the CPU (same duration, --local).
  local dev sps_cuda="" sps_cpu=""
  for dev in $([ "$RUN_DEVICE" = cuda ] && echo "cuda cpu" || echo cpu); do
    if step $((duration + 60)) "cnn trainer --device=$dev (${duration}s, --local)" "$BIN/relaxps-worker" \
        --local --model=cnn --data_dir="$data" --duration_s="$duration" --device="$dev" \
        --eval_every_s=0 --log_every_s=5 >"$work/worker_$dev.log" 2>&1; then
      local sps; sps=$(grep -a '^final ' "$work/worker_$dev.log" | tail -n 1 | grep -o ' samples_per_s=[^ ]*' | cut -d= -f2)
      grep -a '^final ' "$work/worker_$dev.log" | tail -n 1
      echo "result cnn_${dev}_samples_per_s=${sps:-?}"
      [ "$dev" = cuda ] && sps_cuda=$sps || sps_cpu=$sps
    else
      tail -n 10 "$work/worker_$dev.log"; failed=1
    fi
  done
  if [ -n "$sps_cuda" ] && [ -n "$sps_cpu" ]; then
    echo "result cnn_cuda_vs_cpu=$(awk -v a="$sps_cuda" -v b="$sps_cpu" 'BEGIN { printf "%.3f", a / b }')"
  fi

  # 4. 2x2 cluster, chain replication (R=2), workers on the device; server 1
  #    is killed midway and the chains fail over to server 0.
  # shellcheck source=../bench/cluster_lib.sh
  . "$dir/bench/cluster_lib.sh"
  local cl="$work/cluster"
  mkdir -p "$cl"
  if [ "$(left)" -gt 60 ]; then
    echo; echo "=== [$((SECONDS - start))s] 2x2 cluster, chain failover, workers --device=$RUN_DEVICE"
    CLUSTER_SERVER_ARGS=(--events_file="$cl/events.jsonl")
    if cluster_start "$cl" 2 2 --consistency=async --recovery=chain --replicas=2 \
        --heartbeat_timeout_ms=1500 --events_file="$cl/events.jsonl"; then
      local w
      for w in 0 1; do
        cluster_worker "$cl" "$w" --model=cnn --data_dir="$data" --num_workers=2 \
          --duration_s=$((duration + 10)) --device="$RUN_DEVICE" --eval_every_s=0 \
          --final_eval=true --log_every_s=5 --events_file="$cl/events.jsonl"
      done
      sleep $((duration / 2 + 3))
      kill -KILL "${CLUSTER_PIDS[2]}" 2>/dev/null && echo "killed server 1 (pid ${CLUSTER_PIDS[2]})"
      # The workers stop by themselves after --duration_s (or fail).
      cluster_wait_workers || true
      local ok=1
      for w in 0 1; do
        local line; line=$(grep -a '^final ' "$cl/worker-$w.log" | tail -n 1)
        [ -n "$line" ] || ok=0
        echo "worker $w: ${line:-no final line}"
      done
      local fo; fo=$(grep -c '"kind":"chain_failover"' "$cl/events.jsonl" 2>/dev/null || true)
      echo "result cluster_2x2_chain_failovers=${fo:-0} workers_finished=$ok"
      if [ $ok = 0 ] || [ "${fo:-0}" -lt 1 ]; then
        failed=1
        for f in "$cl"/*.log; do echo "--- $f"; tail -n 8 "$f"; done
      fi
      cluster_stop
    else
      echo "cluster did not start"; failed=1
    fi
  else
    echo "skipped the cluster: the ${budget}s budget is spent"; failed=1
  fi
  echo
  echo "gpu_check: $([ $failed = 0 ] && echo PASS || echo FAIL) in $((SECONDS - start))s (device $RUN_DEVICE)"
  return $failed
}

if [ "$MODE" = bundle ]; then make_bundle; exit $?; fi
if [ "$MODE" = run ]; then run_bundle; exit $?; fi

# ---- build mode (a machine with the packages and a GPU) ---------------------

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
