#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): a bundle with
# the variants
#   main (main: attention_bench, cuda_forward_bench, deepinfer, fp8_gemm_bench,
#         fp8_gemm_kernel_test, mhc_bench),
#   pers (main + experiments/prefill-kernels: cuda_forward_bench, fp8_gemm_bench,
#         fp8_gemm_kernel_test).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 1  # pers's correctness (fp8_gemm_kernel_test: parity on the
#                                      # model shapes, rows bitwise batch-invariant) beside
#                                      # main's; fp8_gemm_bench at M 4096 and 8192 alternated
#                                      # (the prefill tiles pers replaces); pers's prefill
#                                      # kernel per SASS instruction on wq_b at M 4096
#                                      # and mhc_kernel_test + mhc_bench 4096 alternated (the
#                                      # mHC pre side's fn loads), its source page
#   bash scripts/gpu_pending_run.sh 3  # pers after patch 0003 (epilogue): parity, fp8_gemm_bench
#                                      # M 4096 for main / pers / pers in the n-fastest tile
#                                      # order, M 8192, and a folded shape's source pages
#   bash scripts/gpu_pending_run.sh 2  # the forward's prefill and batch-1 decode for main and
#                                      # pers (gpu_ab_run.sh: 4,096-token prompts, whose FP8
#                                      # GEMMs take the prefill kernel)
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh \
#     main=attention_bench,cuda_forward_bench,deepinfer,fp8_gemm_bench,fp8_gemm_kernel_test,mhc_bench \
#     pers@prefill-kernels=cuda_forward_bench,fp8_gemm_bench,fp8_gemm_kernel_test
# (Earlier phases, e.g. the twenty-seventh session's ping-pong variant, are in git history.)
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-1}" in
  1)
    # pers's kernel is new: a failing or hanging test (240 s at most) skips its benches, so that
    # a hang cannot take the call's time and the packed logs with it.
    variants=(main pers)
    for v in main pers; do
      timeout 240 .carry/ab/"${v}"/fp8_gemm_kernel_test > "${out}/${v}_fp8_test.log" 2>&1
      rc=$?
      echo "== ${v} fp8_gemm_kernel_test: rc ${rc}"; summary "${out}/${v}_fp8_test.log"
      [[ "${v}" == pers && "${rc}" != 0 ]] && variants=(main)
    done
    # pers runs twice: its pipelined K loop (default) and, with DI_FP8_PREFILL_NOPIPE=1 (patch
    # 0003's experiment switch), the unpipelined one ("persnp").
    runs=(main)
    [[ "${variants[*]}" == "main pers" ]] && runs=(main pers persnp)
    for m in 4096 8192; do
      for v in "${runs[@]}" "${runs[@]}"; do
        b=${v}; np=0
        [[ "${v}" == persnp ]] && b=pers np=1
        DI_FP8_PREFILL_NOPIPE=${np} timeout 150 .carry/ab/"${b}"/fp8_gemm_bench "" "${m}" \
          > "${out}/fp8_${v}_${m}.log" 2>&1
        echo "-- ${v} M ${m}:"; grep -E '^\| v4' "${out}/fp8_${v}_${m}.log" | cut -d'|' -f2,5,8,10,11
      done
    done
    # mHC pre (pers: the next step's first fn block loaded ahead): parity, then mhc_bench 4096
    # alternated.
    timeout 150 .carry/ab/pers/mhc_kernel_test > "${out}/pers_mhc_test.log" 2>&1
    rc=$?
    echo "== pers mhc_kernel_test: rc ${rc}"; summary "${out}/pers_mhc_test.log"
    if [[ "${rc}" == 0 ]]; then
      for v in main pers main pers; do
        timeout 60 .carry/ab/"${v}"/mhc_bench 4096 > "${out}/mhc_${v}_4096.log" 2>&1
        echo "-- ${v} mhc 4096:"; grep -E '^pre |^post' "${out}/mhc_${v}_4096.log"
      done
      ncu_source_page "${out}" pers_mhc mhc_pre_partial 2 .carry/ab/pers/mhc_bench 4096 bf16
    fi
    if [[ "${variants[*]}" == "main pers" ]]; then
      ncu_source_page "${out}" pers_fp8pf fp8_gemm_sm90_prefill 1 .carry/ab/pers/fp8_gemm_bench \
        v41_wq_b 4096
    fi
    ;;
  3)
    # Patch 0003 (the bounds-check-free epilogue) is new: pers's parity first. Then fp8_gemm_bench
    # at M 4096 for main, pers (tile order: 8 m-tiles per n-tile) and persg1
    # (DI_FP8_PREFILL_GROUP=1: the old kernel's n-fastest order), alternated twice; M 8192 for
    # main and pers; the source pages of a folded shape (shared w1|w3, 3 K-chunks, M 4096) for
    # main and pers.
    timeout 240 .carry/ab/pers/fp8_gemm_kernel_test > "${out}/pers_fp8_test.log" 2>&1
    rc=$?
    echo "== pers fp8_gemm_kernel_test: rc ${rc}"; summary "${out}/pers_fp8_test.log"
    [[ "${rc}" != 0 ]] && exit 1
    bench() {  # bench LABEL VARIANT GROUP M
      DI_FP8_PREFILL_GROUP=$3 timeout 150 .carry/ab/"$2"/fp8_gemm_bench "" "$4" \
        > "${out}/fp8_$1_$4.log" 2>&1
      echo "-- $1 M $4:"; grep -E '^\| v4' "${out}/fp8_$1_$4.log" | cut -d'|' -f2,5,8,10,11
    }
    for r in 1 2; do
      bench main main 8 4096; bench pers pers 8 4096; bench persg1 pers 1 4096
    done
    bench main main 8 8192; bench pers pers 8 8192
    ncu_source_page "${out}" main_w13 fp8_gemm_sm90_kernel 1 "${M}"/fp8_gemm_bench \
      v41_shared_w13 4096
    ncu_source_page "${out}" pers_w13 fp8_gemm_sm90_prefill 1 .carry/ab/pers/fp8_gemm_bench \
      v41_shared_w13 4096
    ;;
  2)
    pack_out_logs "${out}"
    trap - EXIT
    OUT="${out}/b1" timeout 420 bash scripts/gpu_ab_run.sh --batch 1 --runs 2 main pers
    ;;
  *) echo "gpu_pending_run: phase 1, 2 or 3" >&2; exit 2 ;;
esac
