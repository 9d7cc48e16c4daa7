#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): a bundle with
# the variants
#   main   (main: cuda_forward_bench, cuda_forward_test, deepinfer, indexer_bench,
#           indexer_kernel_test; the fixture),
#   ahead2 (main + experiments/indexer-decode-ahead2: indexer_bench, indexer_kernel_test).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 1  # main's parity (its test binaries and replay-fixture in
#                                      # fp32 / bf16: the twenty-fifth session merged FP8, MoE
#                                      # and indexer kernels after the last forward run); the
#                                      # forward at real dimensions with the rewritten indexer
#                                      # scoring (nine-layer synthetic V4.1 checkpoint, batch 1
#                                      # and 64, the indexer kernels traced); indexer_bench score
#                                      # with the scale spreads (the per-block path's cost);
#                                      # the merged decode scoring's warp stalls at 64 rows,
#                                      # also per SASS instruction (ncu's source page); then
#                                      # ahead2: its decode tests and indexer_bench score
#                                      # 64 / 8 / 1 alternated with main
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh --fixture \
#     main=cuda_forward_bench,cuda_forward_test,deepinfer,indexer_bench,indexer_kernel_test \
#     ahead2@indexer-decode-ahead2=indexer_bench,indexer_kernel_test
# (Earlier phases, e.g. the twenty-fifth session's indexer A/Bs, are in git history.)
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
M=.carry/ab/main FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]' "$1" | head -n 20; }
case "${1:-1}" in
  1)
    timeout 120 "${M}"/indexer_kernel_test --gtest_filter='IndexerKernel.*Score*' \
      > "${out}/idx_test.log" 2>&1
    echo "== indexer_kernel_test: rc $?"; summary "${out}/idx_test.log"
    timeout 120 "${M}"/indexer_bench score > "${out}/idx_bench.log" 2>&1
    echo "== indexer_bench score: rc $?"; grep -E '^score|^ceiling' "${out}/idx_bench.log"
    GPU_BIN_DIR=${M} GPU_LIB_DIR=.carry/ab/lib timeout 120 \
      bash scripts/gpu_ncu_stalls.sh indexer_score_decode_kernel 3 indexer_bench score 64 \
      > "${out}/stalls-idx_b64.txt"
    grep -E 'time_duration|inst_executed|issue_active|long_scoreboard|wait|math_pipe|not_sel' \
      "${out}/stalls-idx_b64.txt"
    # Where the stalls are: the warp-state samples per SASS instruction (source page as CSV).
    (GPU_LIB_DIR=.carry/ab/lib ncu_env
     timeout 120 ncu --clock-control none -k regex:indexer_score_decode_kernel --launch-skip 3 \
       --launch-count 1 --section SourceCounters --section WarpStateStats -o "${out}/idx_src" \
       "${M}"/indexer_bench score 64 > "${out}/idx_src_collect.log" 2>&1
     ncu -i "${out}/idx_src.ncu-rep" --page source --print-source sass --csv \
       > "${out}/idx_src_sass.txt" 2>&1) || echo "source page: see idx_src_collect.log"
    timeout 60 .carry/ab/ahead2/indexer_kernel_test --gtest_filter='IndexerKernel.Decode*' \
      > "${out}/ahead2_test.log" 2>&1
    echo "== ahead2 indexer_kernel_test Decode*: rc $?"; summary "${out}/ahead2_test.log"
    for r in 1 2; do
      for v in main ahead2; do
        for rows in 64 8 1; do
          timeout 30 .carry/ab/"${v}"/indexer_bench score "${rows}" \
            > "${out}/idx_bench_${v}_${rows}_${r}.log" 2>&1
          echo "-- ${v} run ${r}: $(grep -E '^score' "${out}/idx_bench_${v}_${rows}_${r}.log")"
        done
      done
    done
    trap - EXIT
    for b in 1 64; do
      parity=()
      [[ "${b}" == 1 ]] && parity=(--parity main)
      OUT="${out}/b${b}" timeout 400 bash scripts/gpu_ab_run.sh "${parity[@]}" --batch "${b}" \
        --runs 1 --trace 'indexer|index_' main
    done
    pack_out_logs "${out}"
    ;;
  *) echo "gpu_pending_run: phase 1" >&2; exit 2 ;;
esac
