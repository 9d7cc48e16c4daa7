#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): a bundle with
# the variants
#   main (main: attention_bench, cuda_forward_bench, deepinfer, fp8_gemm_bench,
#         fp8_gemm_kernel_test, mhc_bench),
#   pers (main + experiments/fp8-merge: cuda_forward_bench, fp8_gemm_bench,
#         fp8_gemm_kernel_test).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 4  # the merge candidate: pers's fp8_gemm_kernel_test, then
#                                      # fp8_gemm_bench M 4096 and 8192, main / pers alternated
#   bash scripts/gpu_pending_run.sh 2  # the forward's prefill and batch-1 decode for main and
#                                      # pers (gpu_ab_run.sh: 4,096-token prompts, whose FP8
#                                      # GEMMs take the prefill kernels)
# (Phases 1 and 3, the twenty-seventh session's variants of the persistent kernel, are in git
# history.)
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh \
#     main=attention_bench,cuda_forward_bench,deepinfer,fp8_gemm_bench,fp8_gemm_kernel_test,mhc_bench \
#     pers@fp8-merge=cuda_forward_bench,fp8_gemm_bench,fp8_gemm_kernel_test
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-4}" in
  4)
    # The merge candidate (pers = main + experiments/fp8-merge: the persistent kernel for one
    # K-chunk or B = 128, the per-tile kernel for B = 32 with K-chunks): fp8_gemm_kernel_test
    # (parity; rows bitwise batch-invariant, wq_b now among them), then fp8_gemm_bench at M 4096
    # and 8192, main and pers alternated.
    timeout 300 .carry/ab/pers/fp8_gemm_kernel_test > "${out}/pers_fp8_test.log" 2>&1
    rc=$?
    echo "== pers fp8_gemm_kernel_test: rc ${rc}"; summary "${out}/pers_fp8_test.log"
    grep -E 'v41_wq_b: m=|v4_wq_a: m=' "${out}/pers_fp8_test.log" | head -n 12
    [[ "${rc}" != 0 ]] && exit 1
    for m in 4096 8192; do
      for v in main pers main pers; do
        timeout 150 .carry/ab/"${v}"/fp8_gemm_bench "" "${m}" > "${out}/fp8_${v}_${m}.log" 2>&1
        echo "-- ${v} M ${m}:"; grep -E '^\| v4' "${out}/fp8_${v}_${m}.log" | cut -d'|' -f2,5,6,7
      done
    done
    ;;
  2)
    pack_out_logs "${out}"
    trap - EXIT
    OUT="${out}/b1" timeout 420 bash scripts/gpu_ab_run.sh --batch 1 --runs 2 main pers
    ;;
  *) echo "gpu_pending_run: phase 2 or 4" >&2; exit 2 ;;
esac
