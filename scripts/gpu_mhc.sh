#!/usr/bin/env bash
# Fused mHC kernels on the GPU machine, in two steps:
#   here:  scripts/gpu_mhc.sh bundle   builds mhc_kernel_test + mhc_bench (cuda-release preset, sm_90a,
#          static cudart) and copies them with libfmt/libspdlog into .carry/mhc (git-ignored);
#   there: scripts/gpu_mhc.sh run      (device tool, carry [".carry/mhc"]) runs the parity and
#          batch-invariance tests, then the benchmark; logs go to $OUT (or ./gpu-out).
# DI_MHC_BUILD_DIR=DIR selects the build directory (default build/cuda-release).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${DI_MHC_BUILD_DIR:-build/cuda-release}
case "${1:-}" in
  bundle)
    set -e
    [[ -f "${build}/build.ninja" ]] || cmake --preset cuda-release -B "${build}" >/dev/null
    cmake --build "${build}" -j "${DI_JOBS:-2}" --target mhc_kernel_test mhc_bench
    rm -rf .carry/mhc && mkdir -p .carry/mhc/bin .carry/mhc/lib
    bins=("${build}/tests/kernels/mhc_kernel_test" "${build}/bench/mhc_bench")
    cp "${bins[@]}" .carry/mhc/bin/
    for lib in $(ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u | grep -E 'libfmt|libspdlog'); do
      cp -L "${lib}" .carry/mhc/lib/
    done
    du -sh .carry/mhc
    ;;
  run)
    out=${OUT:-gpu-out}
    mkdir -p "${out}"
    export LD_LIBRARY_PATH="$PWD/.carry/mhc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "${out}/gpu.txt"
    status=0
    .carry/mhc/bin/mhc_kernel_test --gtest_output="xml:${out}/mhc_kernel_test.xml" 2>&1 |
      tee "${out}/mhc_kernel_test.log" || status=1
    .carry/mhc/bin/mhc_bench 2>&1 | tee "${out}/mhc_bench.log" || status=1
    exit "${status}"
    ;;
  *)
    echo "usage: scripts/gpu_mhc.sh bundle|run" >&2
    exit 2
    ;;
esac
