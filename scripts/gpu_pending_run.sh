#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): an A/B bundle
# with the variants
#   main (main: indexer_kernel_test, indexer_bench),
#   idx  (main + experiments/indexer-decode-direct: indexer_kernel_test, indexer_bench).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 1  # idx: indexer_kernel_test (every score bitwise the CPU's,
#                                      # decode and prefill, tiny weights); indexer_bench score
#                                      # alternated with main; Nsight Compute of idx's decode
#                                      # scoring at 64 rows (instructions, issue, stalls)
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh main=indexer_kernel_test,indexer_bench \
#     idx@indexer-decode-direct=indexer_kernel_test,indexer_bench
# (Earlier sessions' phases are in git history.)
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-1}" in
  1)
    echo "== idx indexer_kernel_test"
    timeout 300 .carry/ab/idx/indexer_kernel_test --gtest_filter='IndexerKernel.*Score*' \
      > "${out}/idx_test.log" 2>&1
    echo "rc $?"; summary "${out}/idx_test.log"
    timeout 60 "${M}"/indexer_bench score > "${out}/idx_warm-up.log" 2>&1
    for r in 1 2; do
      for v in main idx; do
        timeout 120 .carry/ab/"${v}"/indexer_bench score > "${out}/idx_bench_${v}_${r}.log" 2>&1
        echo "-- ${v} run ${r}: rc $?"; grep -E '^score|^ceiling' "${out}/idx_bench_${v}_${r}.log"
      done
    done
    GPU_BIN_DIR=.carry/ab/idx GPU_LIB_DIR=.carry/ab/lib OUT="${out}" \
      timeout 240 bash scripts/gpu_ncu.sh idx_b64 indexer_score_decode_kernel 3 indexer_bench score 64
    GPU_BIN_DIR=.carry/ab/idx GPU_LIB_DIR=.carry/ab/lib timeout 240 \
      bash scripts/gpu_ncu_stalls.sh indexer_score_decode_kernel 3 indexer_bench score 64 \
      > "${out}/stalls-idx_b64.txt"
    grep -E 'time_duration|inst_executed|issue_active|long_scoreboard|wait|math_pipe|not_sel' \
      "${out}/stalls-idx_b64.txt"
    grep -E 'highest-utilized|Duration|Registers Per|Achieved Occ|DRAM Throughput' \
      "${out}/ncu-idx_b64.txt"
    ;;
  *) echo "gpu_pending_run: phase 1" >&2; exit 2 ;;
esac
