#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): a bundle with
# the variants
#   main (main: attention_bench, cuda_forward_bench, deepinfer, fp8_gemm_bench,
#         fp8_gemm_kernel_test, mhc_bench),
#   pp   (main + experiments/fp8-prefill-pingpong: cuda_forward_bench, fp8_gemm_bench,
#         fp8_gemm_kernel_test).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 1  # pp's correctness (fp8_gemm_kernel_test: parity on the
#                                      # model shapes, rows bitwise batch-invariant) beside
#                                      # main's; fp8_gemm_bench at M 4096 and 8192 alternated
#                                      # (the prefill tiles pp changes); pp's warp stalls on
#                                      # wq_b at M 8192, and main's swapped decode kernel's
#                                      # at M 16
#   bash scripts/gpu_pending_run.sh 2  # the mHC pre side's partial kernel at T 4096 (bf16)
#                                      # per SASS instruction (ncu's source page: issue 6's
#                                      # 70 % of copy needs its instruction count cut), the
#                                      # same for the wgmma attention at batch 1 (~25 µs a
#                                      # layer of latency in the batch-1 step); then the
#                                      # forward's prefill and decode at batch 1 for main and
#                                      # pp (gpu_ab_run.sh: 4,096-token prompts, whose FP8
#                                      # GEMMs take the prefill tiles)
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh \
#     main=attention_bench,cuda_forward_bench,deepinfer,fp8_gemm_bench,fp8_gemm_kernel_test,mhc_bench \
#     pp@fp8-prefill-pingpong=cuda_forward_bench,fp8_gemm_bench,fp8_gemm_kernel_test
# (Earlier phases, e.g. the twenty-sixth session's indexer prefetch variants, are in git
# history.)
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-1}" in
  1)
    # pp's barrier hand-off is new: a failing or hanging test (240 s at most) skips its benches,
    # so that a hang cannot take the call's time and the packed logs with it.
    variants=(main pp)
    for v in main pp; do
      timeout 240 .carry/ab/"${v}"/fp8_gemm_kernel_test > "${out}/${v}_fp8_test.log" 2>&1
      rc=$?
      echo "== ${v} fp8_gemm_kernel_test: rc ${rc}"; summary "${out}/${v}_fp8_test.log"
      [[ "${v}" == pp && "${rc}" != 0 ]] && variants=(main)
    done
    for m in 4096 8192; do
      for v in "${variants[@]}" "${variants[@]}"; do
        timeout 150 .carry/ab/"${v}"/fp8_gemm_bench "" "${m}" > "${out}/fp8_${v}_${m}.log" 2>&1
        echo "-- ${v} M ${m}:"; grep -E '^\| v4' "${out}/fp8_${v}_${m}.log" | cut -d'|' -f2,5,8,10,11
      done
    done
    if [[ "${variants[*]}" == "main pp" ]]; then
      GPU_BIN_DIR=.carry/ab/pp GPU_LIB_DIR=.carry/ab/lib timeout 120 \
        bash scripts/gpu_ncu_stalls.sh fp8_gemm_sm90_kernel 0 fp8_gemm_bench v41_wq_b 8192 \
        > "${out}/stalls-pp_wq_b_8192.txt"
      grep -E 'time_duration|inst_executed|issue_active|long_scoreboard|barrier|wait|math_pipe|tensor' \
        "${out}/stalls-pp_wq_b_8192.txt"
    fi
    # Issue 6's M <= 16 target: the swapped decode kernel at M 16 on wq_b (60-68 % of copy on
    # the H200, against 80 %): where its warps wait.
    GPU_BIN_DIR=${M} GPU_LIB_DIR=.carry/ab/lib timeout 120 \
      bash scripts/gpu_ncu_stalls.sh fp8_gemm_sm90_swap 3 fp8_gemm_bench v41_wq_b 16 \
      > "${out}/stalls-main_swap_wq_b_16.txt"
    grep -E 'time_duration|inst_executed|issue_active|long_scoreboard|barrier|wait|math_pipe|tensor' \
      "${out}/stalls-main_swap_wq_b_16.txt"
    ;;
  2)
    # Two source pages (main: the mHC pre side's partial kernel, T 4096 bf16; the wgmma attention
    # at batch 1), then the forward's 4,096-token prefill (its FP8 GEMMs take the prefill tiles)
    # and batch 1 decode, main and pp alternated twice.
    timeout 60 "${M}"/mhc_bench 4096 > "${out}/mhc_bench_4096.log" 2>&1
    grep -E 'pre|post' "${out}/mhc_bench_4096.log" | head -n 8
    ncu_source_page "${out}" mhc mhc_pre_partial 2 "${M}"/mhc_bench 4096 bf16
    ncu_source_page "${out}" attn sparse_attn_wgmma 3 "${M}"/attention_bench 1 bf16
    pack_out_logs "${out}"
    trap - EXIT
    OUT="${out}/b1" timeout 420 bash scripts/gpu_ab_run.sh --batch 1 --runs 2 main pp
    ;;
  *) echo "gpu_pending_run: phase 1 or 2" >&2; exit 2 ;;
esac
