#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): a bundle with
# the variants
#   main (main: attention_bench, cuda_forward_bench, deepinfer, fp8_gemm_bench,
#         fp8_gemm_kernel_test, mhc_bench),
#   pers (main + experiments/SERIES: cuda_forward_bench, fp8_gemm_bench, fp8_gemm_kernel_test);
#   pending: SERIES = fp8-prefill-pairs (phase 5, then 2).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 5  # fp8_gemm_bench M 4096 main / pers, then pers's
#                                      # fp8_gemm_kernel_test
#   bash scripts/gpu_pending_run.sh 2  # the forward's prefill and batch-1 decode for main and
#                                      # pers (gpu_ab_run.sh: 4,096-token prompts, whose FP8
#                                      # GEMMs take the prefill kernels)
# (Phases 1, 3 and 4, the twenty-seventh session's variants of the persistent kernel and its
# merge candidate, are in git history.)
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh \
#     main=attention_bench,cuda_forward_bench,deepinfer,fp8_gemm_bench,fp8_gemm_kernel_test,mhc_bench \
#     pers@SERIES=cuda_forward_bench,fp8_gemm_bench,fp8_gemm_kernel_test
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-5}" in
  5)
    # fp8_gemm_bench M 4096 main / pers, then pers's fp8_gemm_kernel_test (parity; rows bitwise
    # batch-invariant).
    for v in main pers; do
      timeout 100 .carry/ab/"${v}"/fp8_gemm_bench "" 4096 > "${out}/fp8_${v}_4096.log" 2>&1
      echo "-- ${v} M 4096:"; grep -E '^\| v4' "${out}/fp8_${v}_4096.log" | cut -d'|' -f2,6,7
    done
    timeout 300 .carry/ab/pers/fp8_gemm_kernel_test > "${out}/pers_fp8_test.log" 2>&1
    echo "== pers fp8_gemm_kernel_test: rc $?"; summary "${out}/pers_fp8_test.log"
    grep -E 'rows differ' "${out}/pers_fp8_test.log" | grep -v ' 0 of ' | head -n 12
    ;;
  2)
    pack_out_logs "${out}"
    trap - EXIT
    OUT="${out}/b1" timeout 420 bash scripts/gpu_ab_run.sh --batch 1 --runs 2 main pers
    ;;
  *) echo "gpu_pending_run: phase 2 or 5" >&2; exit 2 ;;
esac
