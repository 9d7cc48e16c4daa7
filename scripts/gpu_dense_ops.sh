#!/usr/bin/env bash
# Dense small ops of issue 6 on the GPU machine, in two steps:
#   here:   scripts/gpu_dense_ops.sh bundle   builds dense_ops_kernel_test and dense_ops_bench
#           (cuda-release preset: sm_90a, static cudart) and copies them with libfmt/libspdlog
#           into .carry/dense (git-ignored);
#   device: scripts/gpu_dense_ops.sh run      (device tool, carry [".carry/dense"]) runs the parity
#           tests, then the benchmark; logs and the gtest XML go to $OUT (or ./gpu-out).
# DI_GPU_BUILD_DIR=DIR builds in DIR (default build/cuda-release).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
if [[ "${mode}" == bundle ]]; then
  set -e
  build=${DI_GPU_BUILD_DIR:-build/cuda-release}
  cmake --preset cuda-release -B "${build}" >/dev/null
  cmake --build "${build}" -j "${DI_JOBS:-2}" --target dense_ops_kernel_test dense_ops_bench
  rm -rf .carry/dense && mkdir -p .carry/dense/bin .carry/dense/lib
  bins=("${build}/tests/kernels/dense_ops_kernel_test" "${build}/bench/dense_ops_bench")
  cp "${bins[@]}" .carry/dense/bin/
  for lib in $(ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u | grep -E 'libfmt|libspdlog|libgomp'); do
    cp -L "${lib}" .carry/dense/lib/
  done
  du -sh .carry/dense
  exit 0
fi
out=${OUT:-gpu-out}
mkdir -p "${out}"
export LD_LIBRARY_PATH="$PWD/.carry/dense/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "${out}/gpu.txt"
status=0
.carry/dense/bin/dense_ops_kernel_test --gtest_output="xml:${out}/dense_ops_test.xml" \
  > "${out}/dense_ops_test.log" 2>&1 || status=1
grep -E "^\[  (FAILED|PASSED|  OK) |Failure|error|mismatch" "${out}/dense_ops_test.log" | head -80
tail -3 "${out}/dense_ops_test.log"
.carry/dense/bin/dense_ops_bench 2>&1 | tee "${out}/dense_ops_bench.log" || status=1
exit "${status}"
