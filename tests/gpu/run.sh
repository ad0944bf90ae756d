#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one go: configure a CUDA build
# (build-gpu/, for the GPU's own architecture as nvidia-smi reports it, else
# sm_90; GPU_SM overrides), build what the GPU
# checks need, run them (every op against the CPU backend, GEMMs, a tiny
# policy through the public API), then a short benchmark (train step in fp32
# and with bf16 GEMMs, MFU against the GPU's dense bf16 peak; decode in fp32
# only), and print a table.
# Made for a fresh H200 machine (16 cores, Debian-like, no network): it
# installs nothing, checks the build dependencies first and names the
# missing ones. Takes 4-5 minutes there; logs go to build-gpu/gpu-run/.
#
# Usage: tests/gpu/run.sh            (from anywhere in the repository)
# Environment: GPU_SM (default: the GPU's, else 90), BUILD_DIR (default build-gpu),
#              SKIP_BENCH=1 (tests only), JOBS (default: all cores),
#              MATMULS (default "fp32 bf16": the GEMM precisions benchmarked),
#              RLPOST_PEAK_TFLOPS (the GPU's dense bf16 peak for MFU; known
#              without it for H100/H200 SXM and A100).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu}
sm=${GPU_SM:-90}
jobs=${JOBS:-$(nproc)}
logs="$build/gpu-run"
start=$SECONDS

say() { printf '\n== %s (%ds)\n' "$*" $((SECONDS - start)); }
die() { printf '\nrun.sh: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- checks
say "checking the machine"
missing=()
for tool in meson ninja cc c++ python3 pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool (program)")
done
cuda_root=/usr/local/cuda
command -v nvcc >/dev/null 2>&1 || [ -x "$cuda_root/bin/nvcc" ] || missing+=("nvcc (CUDA toolkit in PATH or $cuda_root)")
for header in cublas_v2.h cuda_runtime.h; do
  [ -f "$cuda_root/include/$header" ] || missing+=("$cuda_root/include/$header (CUDA toolkit)")
done
if command -v pkg-config >/dev/null 2>&1; then
  for pc in jansson libpcre2-8 icu-uc libcurl cmocka; do
    pkg-config --exists "$pc" || missing+=("$pc (pkg-config; Debian: lib${pc%%-*}-dev or similar)")
  done
  pkg-config --exists openblas || pkg-config --exists blas || missing+=("openblas (pkg-config; Debian: libopenblas-dev)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  printf 'missing build dependencies:\n' >&2
  printf '  - %s\n' "${missing[@]}" >&2
  die "install them (e.g. apt-get install meson ninja-build libopenblas-dev libjansson-dev libpcre2-dev libicu-dev libcurl4-openssl-dev libcmocka-dev, and the CUDA toolkit) and run again"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    || echo "nvidia-smi failed: the tests will say whether a GPU is usable"
  if [ -z "${GPU_SM:-}" ]; then # the kernels are compiled for this GPU only
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    [[ "$cap" =~ ^[0-9]+$ ]] && sm=$cap
  fi
else
  echo "nvidia-smi not found; the tests will say whether a GPU is usable"
fi
"${cuda_root}/bin/nvcc" --version 2>/dev/null | tail -1 || nvcc --version | tail -1

# ----------------------------------------------------------------- build
say "configuring $build (CUDA, sm_$sm)"
mkdir -p "$build"
if [ -f "$build/build.ninja" ]; then
  meson setup --reconfigure "$build" -Dcuda=enabled -Dgpu_sm="$sm" >"$build/setup.log" 2>&1
else
  meson setup "$build" -Dcuda=enabled -Dgpu_sm="$sm" >"$build/setup.log" 2>&1
fi || { tail -30 "$build/setup.log"; die "meson setup failed (log: $build/setup.log)"; }
mkdir -p "$logs"

say "building the CUDA module, the GPU tests and the benchmark ($jobs jobs)"
targets=(lib/librlpost-cuda.so tests/test_cuda_backend tests/test_cuda_ops tests/test_cuda_ops_ref tests/test_cuda_policy
         tests/test_cuda_request tests/test_cuda_data_parallel tests/test_cuda_smollm2_shape tests/test_nccl_module
         tests/bench/bench_train)
ninja -C "$build" -j "$jobs" "${targets[@]}" >"$logs/build.log" 2>&1 \
  || { tail -40 "$logs/build.log"; die "build failed (log: $logs/build.log)"; }

# ----------------------------------------------------------------- tests
say "GPU tests (meson suite 'gpu')"
meson test -C "$build" --no-rebuild --suite gpu --print-errorlogs --num-processes 1 >"$logs/tests.log" 2>&1
tests_rc=$?
grep -E '^ *[0-9]+/[0-9]+ ' "$logs/tests.log" || true
grep -E '^(Ok|Fail|Skipped|Timeout):' "$logs/tests.log" || true
cp "$build/meson-logs/testlog.txt" "$logs/testlog.txt" 2>/dev/null || true
if grep -qE '^Skipped: *[1-9]' "$logs/tests.log"; then
  echo "GPU tests skipped: no usable GPU or driver here:"
  grep -m1 '^skipped:' "$logs/testlog.txt" || true
  [ "$tests_rc" -eq 0 ] && tests_rc=3
fi

# ------------------------------------------------------------- benchmark
results=()
if [ "${SKIP_BENCH:-0}" != 1 ] && [ "$tests_rc" -ne 3 ]; then
  export RLPOST_CUDA_MODULE="$root/$build/lib/librlpost-cuda.so"
  for shape in smollm2 1b; do
    for matmul in ${MATMULS:-fp32 bf16}; do
      reps=$([ "$shape" = 1b ] && echo 2 || echo 5)
      # decode once per shape (fp32): the budget goes to the train step
      decode=$([ "$matmul" = fp32 ] && echo decode || true)
      log="$logs/bench_${shape}_$matmul.log"
      say "benchmark: train step, forward${decode:+ and decode}, $shape shape, $matmul GEMMs"
      RLPOST_MATMUL=$matmul timeout 300 "$build/tests/bench/bench_train" "$jobs" "$reps" cuda "$shape" $decode \
        >"$log" 2>&1
      rc=$?
      sed -n '/shape (/,/^RESULT/p' "$log" | grep -v '^RESULT'
      line=$(grep '^RESULT' "$log" || true)
      if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "bench_train $shape $matmul failed (rc $rc): $(tail -3 "$log")"
      else
        results+=("$line")
      fi
    done
  done
fi

# ----------------------------------------------------------------- table
say "summary"
[ "$tests_rc" -eq 0 ] && echo "GPU tests: all passed" || echo "GPU tests: FAILED or skipped (rc $tests_rc; $logs/tests.log)"
if [ ${#results[@]} -gt 0 ]; then
  printf '\n%-8s %6s %8s %12s %12s %10s %10s %6s %12s %12s\n' shape matmul params "train tok/s" "fwd tok/s" \
    "train TF/s" "GEMM TF/s" MFU "decode b1" "decode b64"
  for line in "${results[@]}"; do
    get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
    printf '%-8s %6s %7.0fM %12.0f %12.0f %10.1f %10.1f %6.3f %12.1f %12.1f\n' "$(get shape)" "$(get matmul)" \
      "$(awk -v p="$(get params)" 'BEGIN { print p / 1e6 }')" "$(get train_tok_s)" "$(get fwd_tok_s)" \
      "$(awk -v g="$(get train_gflops)" 'BEGIN { print g / 1000 }')" \
      "$(awk -v g="$(get gemm_gflops)" 'BEGIN { print g / 1000 }')" "$(get mfu)" "$(get decode1_tok_s)" \
      "$(get decode64_tok_s)"
  done
  echo "(8 x 256 tokens per train step; GEMM TF/s in the row's precision; MFU = train TF/s / the GPU's dense"
  echo " bf16 peak, 0 where unknown (set RLPOST_PEAK_TFLOPS); decode in fp32, sampling on the host; logs in $logs/)"
fi
echo "total $((SECONDS - start)) s"
exit "$tests_rc"
