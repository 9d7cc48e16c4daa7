#!/usr/bin/env bash
# Runs on the GPU machine (device tool, carry [".carry"]) after scripts/gpu_bundle.sh here (or
# gpu_ab_bundle.sh, with GPU_BIN_DIR=.carry/ab/VARIANT GPU_LIB_DIR=.carry/ab/lib and the bundle
# unpacked): profiles one launch of a kernel with Nsight Compute (clocks left alone) and prints
# the main sections.
#   bash scripts/gpu_ncu.sh <name> <kernel regex> <launches to skip> <bundled binary> [args...]
# e.g. bash scripts/gpu_ncu.sh wo_b_m16 swap_kernel 5 fp8_gemm_bench v41_wo_b 16
# The text report goes to $OUT/ncu-<name>.txt.
set -uo pipefail
name=$1 regex=$2 skip=$3 bin=$4
shift 4
out=${OUT:-gpu-out}
mkdir -p "${out}"
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ncu_env
ncu --clock-control none -k "regex:${regex}" --launch-skip "${skip}" --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  "${GPU_BIN_DIR:-.carry/gpu/bin}/${bin}" "$@" > "${out}/ncu-${name}.txt" 2>&1
grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slots Busy|No Eligible|Eligible Warps|Block Limit|Waves Per SM|Shared Memory Configuration Size" "${out}/ncu-${name}.txt" | head -40
