#!/usr/bin/env bash
# Runs on the GPU machine (device tool, carry [".carry"]) after scripts/gpu_bundle.sh here (or
# gpu_ab_bundle.sh, with GPU_BIN_DIR=.carry/ab/VARIANT GPU_LIB_DIR=.carry/ab/lib and the bundle
# unpacked): the warp-stall breakdown (cycles per issued instruction, by reason), issue and
# tensor-pipe activity
# of one launch of a kernel, with Nsight Compute (clocks left alone).
#   bash scripts/gpu_ncu_stalls.sh <kernel regex> <launches to skip> <bundled binary> [args...]
# e.g. bash scripts/gpu_ncu_stalls.sh sparse_attn_kernel 3 attention_bench 256 fp32
set -uo pipefail
regex=$1 skip=$2 bin=$3
shift 3
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ncu_env
m=smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
m=${m},sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected \
  selected dispatch_stall lg_throttle no_instruction branch_resolving tex_throttle membar; do
  m=${m},smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
ncu --clock-control none -k "regex:${regex}" --launch-skip "${skip}" --launch-count 1 --metrics "${m}" \
  "${GPU_BIN_DIR:-.carry/gpu/bin}/${bin}" "$@" 2>&1 | grep -E "smsp__|sm__|gpu__"
