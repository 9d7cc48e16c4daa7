#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): an A/B bundle
# (scripts/gpu_ab_bundle.sh --fixture) with the variants
#   main (main: cuda_forward_test, deepinfer, fp8_gemm_bench, fp8_gemm_kernel_test, moe_bench,
#         indexer_bench, attention_bench),
#   pipe (main + experiments/fp8-prefill-pipelined: fp8_gemm_bench, fp8_gemm_kernel_test),
#   moe  (main + experiments/moe-prefill-n64: moe_kernel_test, moe_bench).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 1  # main's forward with the merged attention kernel and its
#                                      # option (fixture tests, the option's load errors,
#                                      # replay-fixture bf16 / fp32); then the FP8 A/B main vs
#                                      # pipe at M 256 (parity, fp8_gemm_bench alternated)
#   bash scripts/gpu_pending_run.sh 2  # moe: moe_kernel_test (prefill tiles bitwise the decode
#                                      # tiles, CPU parity); moe_bench 4096 alternated with main
#   bash scripts/gpu_pending_run.sh 3  # Nsight Compute (cold): the indexer's decode scoring at
#                                      # 64 rows (never profiled; issue 7's 70 % of copy) and
#                                      # the mma.sync attention at batch 1 (on this H100 kind)
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh --fixture \
#     main=cuda_forward_test,deepinfer,fp8_gemm_bench,fp8_gemm_kernel_test,moe_bench,indexer_bench,attention_bench \
#     pipe@fp8-prefill-pipelined=fp8_gemm_bench,fp8_gemm_kernel_test \
#     moe@moe-prefill-n64=moe_kernel_test,moe_bench
# (The twenty-fourth session's six phases are in git history.)
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-1}" in
  1)
    echo "== main cuda_forward_test (fixture, attention-kernel and drafter errors)"
    DI_FIXTURE_DIR="${FX}" timeout 150 "${M}"/cuda_forward_test \
      --gtest_filter='*TinyFixture*:*WgmmaAttention*:*DraftingWithout*' > "${out}/cft.log" 2>&1
    echo "rc $?"; summary "${out}/cft.log"
    for prec in bf16 fp32; do
      timeout 60 "${M}"/deepinfer replay-fixture "${FX}" --backend cuda --precision "${prec}" \
        --quirk intended > "${out}/replay_${prec}.log" 2>&1
      echo "main replay-fixture ${prec}: rc $? $(tail -n 1 "${out}/replay_${prec}.log")"
    done
    trap - EXIT
    OUT="${out}" bash scripts/gpu_fp8_ab_run.sh --m 256 main pipe
    ;;
  2)
    echo "== moe moe_kernel_test"
    timeout 240 .carry/ab/moe/moe_kernel_test --gtest_filter='MoeExpert*' > "${out}/moe_test.log" 2>&1
    echo "rc $?"; summary "${out}/moe_test.log"
    timeout 120 "${M}"/moe_bench 4096 > "${out}/moe_warm-up.log" 2>&1
    for r in 1 2; do
      for v in main moe; do
        timeout 120 .carry/ab/"${v}"/moe_bench 4096 > "${out}/moe_bench_${v}_${r}.log" 2>&1
        echo "-- ${v} run ${r}: rc $?"; grep -E '^device|^ *4096|w1.w3 alone' "${out}/moe_bench_${v}_${r}.log"
      done
    done
    ;;
  3)
    ncu_pair() {  # name variant regex skip binary args...
      local name=$1 v=$2 regex=$3 skip=$4
      shift 4
      GPU_BIN_DIR=.carry/ab/${v} GPU_LIB_DIR=.carry/ab/lib OUT="${out}" \
        timeout 240 bash scripts/gpu_ncu.sh "${name}" "${regex}" "${skip}" "$@"
      GPU_BIN_DIR=.carry/ab/${v} GPU_LIB_DIR=.carry/ab/lib timeout 240 \
        bash scripts/gpu_ncu_stalls.sh "${regex}" "${skip}" "$@" > "${out}/stalls-${name}.txt"
      grep -E 'time_duration|inst_executed|issue_active|tensor|long_scoreboard|no_instruction' \
        "${out}/stalls-${name}.txt"
    }
    ncu_pair idx_b64 main indexer_score_kernel 3 indexer_bench score 64
    ncu_pair attn_mma_b1 main sparse_attn_kernel 3 attention_bench 1 bf16-mma
    ;;
  *) echo "gpu_pending_run: phase 1, 2 or 3" >&2; exit 2 ;;
esac
