#!/usr/bin/env bash
# Runs on the GPU machine (device tool) from the repo root, after scripts/gpu_bundle.sh here:
# every kernel parity test, then the kernel benchmarks. Logs go to $OUT (or ./gpu-out).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "${out}"
export LD_LIBRARY_PATH="$PWD/.carry/gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "${out}/gpu.txt"
status=0
.carry/gpu/bin/kernel_test --gtest_output="xml:${out}/kernel_test.xml" 2>&1 | tee "${out}/kernel_test.log" || status=1
.carry/gpu/bin/dequant_bench 2>&1 | tee "${out}/dequant_bench.log" || status=1
exit "${status}"
