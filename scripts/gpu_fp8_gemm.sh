#!/usr/bin/env bash
# FP8 GEMM (issue 6) on the GPU machine, in two steps:
#   here:        scripts/gpu_fp8_gemm.sh bundle   builds fp8_gemm_kernel_test + fp8_gemm_bench
#                (cuda-release preset, sm_90a, static cudart) and copies them with libfmt into
#                .carry/gemm (git-ignored);
#   GPU machine: device tool, carry [".carry/gemm"], command `bash scripts/gpu_fp8_gemm.sh run`:
#                the parity + batch-invariance tests, then the benchmark; logs under $OUT.
# DI_GPU_BUILD_DIR=DIR selects the build directory (default build/cuda-release).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${DI_GPU_BUILD_DIR:-build/cuda-release}
case "${1:-}" in
  bundle)
    set -e
    cmake --preset cuda-release -B "${build}" >/dev/null
    cmake --build "${build}" -j "${DI_JOBS:-2}" --target fp8_gemm_kernel_test fp8_gemm_bench
    rm -rf .carry/gemm && mkdir -p .carry/gemm/bin .carry/gemm/lib
    bins=("${build}/tests/kernels/fp8_gemm_kernel_test" "${build}/bench/fp8_gemm_bench")
    cp "${bins[@]}" .carry/gemm/bin/
    for lib in $(ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u | grep -E 'libfmt|libspdlog'); do
      cp -L "${lib}" .carry/gemm/lib/
    done
    du -sh .carry/gemm
    ;;
  run)
    out=${OUT:-gpu-out}
    mkdir -p "${out}"
    # cuBLASLt (bench only) comes from the machine's toolkit or its Python wheels.
    cublas_dirs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib \
      /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib \
      /usr/local/lib/python3*/dist-packages/nvidia/cublas/lib 2>/dev/null | tr '\n' ':')
    export LD_LIBRARY_PATH="$PWD/.carry/gemm/lib:${cublas_dirs}${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
      --format=csv | tee "${out}/gpu.txt"
    status=0
    timeout "${DI_TEST_TIMEOUT:-300}" .carry/gemm/bin/fp8_gemm_kernel_test \
      --gtest_output="xml:${out}/fp8_gemm_test.xml" 2>&1 | tee "${out}/fp8_gemm_test.log" || status=1
    timeout "${DI_BENCH_TIMEOUT:-240}" .carry/gemm/bin/fp8_gemm_bench \
      2> "${out}/fp8_gemm_bench.err" | tee "${out}/fp8_gemm_bench.md" || status=1
    tail -3 "${out}/fp8_gemm_bench.err"
    exit "${status}"
    ;;
  *)
    echo "usage: $0 bundle|run" >&2
    exit 2
    ;;
esac
