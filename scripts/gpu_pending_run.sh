#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): a bundle with
# the variants
#   main (main: attention_bench, cuda_forward_bench, deepinfer, fp8_gemm_bench,
#         fp8_gemm_kernel_test, mhc_bench),
#   VARIANT (main + experiments/SERIES: cuda_forward_bench, fp8_gemm_bench, fp8_gemm_kernel_test),
#   pending: pers@swap-scales-ahead and rel@cluster-relax (twenty-eighth session).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 7           # first: main's forward parity (its
#                                               # cuda_forward_test and fp8_gemm_kernel_test, the
#                                               # fixture replays in fp32 / bf16) and batch 1,
#                                               # traced (the per-kernel chain for planning): the
#                                               # twenty-eighth session merged the swapped decode
#                                               # GEMM's new scale path without a forward run
#   bash scripts/gpu_pending_run.sh 6 pers rel  # each variant's fp8_gemm_kernel_test, then
#                                               # fp8_gemm_bench at M 1, 16 and 64 for main and
#                                               # the variants alternated twice, then two source
#                                               # pages of the first variant's swapped kernel
#                                               # (wq_b M 16, wkv M 1)
#   bash scripts/gpu_pending_run.sh 2 VARIANT   # the forward's prefill and batch-1 decode, main
#                                               # against VARIANT (gpu_ab_run.sh)
# (Phases 1, 3, 4 and 5, the twenty-seventh and twenty-eighth sessions' variants of the
# persistent prefill kernel, are in git history.)
# The bundle, built here (a variant's worktree, .cache/ab-wt/VARIANT, keeps its build folder):
#   bash scripts/gpu_ab_prepare.sh --fixture \
#     main=attention_bench,cuda_forward_bench,cuda_forward_test,deepinfer,fp8_gemm_bench,fp8_gemm_kernel_test,mhc_bench \
#     pers@swap-scales-ahead=cuda_forward_bench,fp8_gemm_bench,fp8_gemm_kernel_test \
#     rel@cluster-relax=fp8_gemm_bench,fp8_gemm_kernel_test
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-6}" in
  6)
    variants=("${@:2}")
    ((${#variants[@]})) || variants=(pers)
    for v in "${variants[@]}"; do
      timeout 300 .carry/ab/"${v}"/fp8_gemm_kernel_test > "${out}/${v}_fp8_test.log" 2>&1
      echo "== ${v} fp8_gemm_kernel_test: rc $?"; summary "${out}/${v}_fp8_test.log"
      grep -E 'rows differ' "${out}/${v}_fp8_test.log" | grep -v ' 0 of ' | head -n 12
    done
    for m in 1 16 64; do
      for r in 1 2; do
        for v in main "${variants[@]}"; do
          timeout 100 .carry/ab/"${v}"/fp8_gemm_bench "" "${m}" > "${out}/fp8_${v}_${m}_${r}.log" 2>&1
          echo "-- ${v} M ${m} (${r}): GEMM us, %copy"
          grep -E '^\| v4' "${out}/fp8_${v}_${m}_${r}.log" | cut -d'|' -f2,8,13 | tr '\n' ';'
          echo
        done
      done
    done
    v=${variants[0]}
    NCU_SAMPLING_INTERVAL=0 ncu_source_page "${out}" "${v}_wqb16" swap 40 .carry/ab/"${v}"/fp8_gemm_bench v41_wq_b 16
    NCU_SAMPLING_INTERVAL=0 ncu_source_page "${out}" "${v}_wkv1" swap 40 .carry/ab/"${v}"/fp8_gemm_bench v41_wkv 1
    tail -n 3 "${out}/${v}_wqb16_src_collect.log"
    ;;
  7)
    pack_out_logs "${out}"
    trap - EXIT
    OUT="${out}/p" timeout 560 bash scripts/gpu_ab_run.sh --parity main --batch 1 --runs 1 \
      --trace 'fp8_gemm' main
    ;;
  2)
    pack_out_logs "${out}"
    trap - EXIT
    OUT="${out}/b1" timeout 420 bash scripts/gpu_ab_run.sh --batch 1 --runs 2 main "${2:-pers}"
    ;;
  *) echo "gpu_pending_run: phase 2, 6 or 7" >&2; exit 2 ;;
esac
