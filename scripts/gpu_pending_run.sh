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
  2)
    # Phase 1's parity ran the whole cuda_forward_test (its CPU references at production
    # dimensions take minutes a test) and ran out of time before batch 1: the fixture, batched,
    # engine, cache, drafter and attention-kernel tests only, then the replays and batch 1.
    GTEST_FILTER='*TinyFixture*:*Dspark*:*Batched*:*Engine*:*KvCache*:*WgmmaAttention*:*DraftingWithout*' \
      OUT="${out}/b1" timeout 420 bash scripts/gpu_ab_run.sh --parity main --batch 1 --runs 2 \
      --trace 'indexer|index_' main
    ;;
  3)
    # Main (with indexer-decode-ahead2 merged) against experiments/indexer-decode-pf3 (the L2
    # prefetch covers each key entry's three sectors): the decode tests of both, indexer_bench
    # score 64 / 8 / 1 / 256 alternated three times, and pf3's stall samples per SASS
    # instruction (were the first uses of tiles 1 and 3's scale words still waiting?).
    for v in main pf3; do
      timeout 120 .carry/ab/"${v}"/indexer_kernel_test \
        --gtest_filter='IndexerKernel.*Score*:IndexerKernel.Decode*' > "${out}/${v}_test.log" 2>&1
      echo "== ${v} indexer_kernel_test Score* Decode*: rc $?"; summary "${out}/${v}_test.log"
    done
    for r in 1 2 3; do
      for v in main pf3; do
        for rows in 64 8 1 256; do
          timeout 30 .carry/ab/"${v}"/indexer_bench score "${rows}" \
            > "${out}/idx_bench_${v}_${rows}_${r}.log" 2>&1
          echo "-- ${v} run ${r}: $(grep -E '^score' "${out}/idx_bench_${v}_${rows}_${r}.log" | cut -c1-150)"
        done
      done
    done
    (GPU_LIB_DIR=.carry/ab/lib ncu_env
     timeout 120 ncu --clock-control none -k regex:indexer_score_decode_kernel --launch-skip 3 \
       --launch-count 1 --section SourceCounters --section WarpStateStats -o "${out}/pf3_src" \
       .carry/ab/pf3/indexer_bench score 64 > "${out}/pf3_src_collect.log" 2>&1
     ncu -i "${out}/pf3_src.ncu-rep" --page source --print-source sass --csv \
       > "${out}/pf3_src_sass.txt" 2>&1
     rm -f "${out}/pf3_src.ncu-rep") || echo "source page: see pf3_src_collect.log"
    ;;
  4)
    # Main against two L2-prefetch variants of the decode scoring (phase 3: three
    # prefetch.global.L2 per entry were slower, 2x at one row, and the loads issued right after
    # the batch's prefetch still waited longest): nopf (none) and bulkpf (cp.async.bulk.prefetch,
    # 80 bytes an entry). Tests, then indexer_bench score 64 / 8 / 1 / 256 alternated.
    for v in main nopf bulkpf; do
      timeout 120 .carry/ab/"${v}"/indexer_kernel_test \
        --gtest_filter='IndexerKernel.*Score*:IndexerKernel.Decode*' > "${out}/${v}_test.log" 2>&1
      echo "== ${v} indexer_kernel_test Score* Decode*: rc $?"; summary "${out}/${v}_test.log"
    done
    for r in 1 2; do
      for v in main nopf bulkpf; do
        for rows in 64 8 1 256; do
          timeout 30 .carry/ab/"${v}"/indexer_bench score "${rows}" \
            > "${out}/idx_bench_${v}_${rows}_${r}.log" 2>&1
          echo "-- ${v} run ${r}: $(grep -E '^score' "${out}/idx_bench_${v}_${rows}_${r}.log" | cut -c18-120)"
        done
      done
    done
    for v in nopf bulkpf; do
      (GPU_LIB_DIR=.carry/ab/lib ncu_env
       timeout 120 ncu --clock-control none -k regex:indexer_score_decode_kernel --launch-skip 3 \
         --launch-count 1 --section SourceCounters --section WarpStateStats -o "${out}/${v}_src" \
         .carry/ab/"${v}"/indexer_bench score 64 > "${out}/${v}_src_collect.log" 2>&1
       ncu -i "${out}/${v}_src.ncu-rep" --page source --print-source sass --csv \
         > "${out}/${v}_src_sass.txt" 2>&1
       rm -f "${out}/${v}_src.ncu-rep") || echo "source page: see ${v}_src_collect.log"
    done
    ;;
  5)
    # Main against bulkbatch (a warp's batch of contiguous entries prefetched into L2 by one
    # cp.async.bulk.prefetch instead of one prefetch.global.L2 a lane): tests, indexer_bench
    # score 64 / 8 / 1 / 256 alternated three times, bulkbatch's stalls per SASS instruction.
    for v in main bulkbatch; do
      timeout 120 .carry/ab/"${v}"/indexer_kernel_test \
        --gtest_filter='IndexerKernel.*Score*:IndexerKernel.Decode*' > "${out}/${v}_test.log" 2>&1
      echo "== ${v} indexer_kernel_test Score* Decode*: rc $?"; summary "${out}/${v}_test.log"
    done
    for r in 1 2 3; do
      for v in main bulkbatch; do
        for rows in 64 8 1 256; do
          timeout 30 .carry/ab/"${v}"/indexer_bench score "${rows}" \
            > "${out}/idx_bench_${v}_${rows}_${r}.log" 2>&1
          echo "-- ${v} run ${r}: $(grep -E '^score' "${out}/idx_bench_${v}_${rows}_${r}.log" | cut -c18-120)"
        done
      done
    done
    (GPU_LIB_DIR=.carry/ab/lib ncu_env
     timeout 120 ncu --clock-control none -k regex:indexer_score_decode_kernel --launch-skip 3 \
       --launch-count 1 --section SourceCounters --section WarpStateStats -o "${out}/bb_src" \
       .carry/ab/bulkbatch/indexer_bench score 64 > "${out}/bb_src_collect.log" 2>&1
     ncu -i "${out}/bb_src.ncu-rep" --page source --print-source sass --csv \
       > "${out}/bb_src_sass.txt" 2>&1
     rm -f "${out}/bb_src.ncu-rep") || echo "source page: see bb_src_collect.log"
    ;;
  *) echo "gpu_pending_run: phase 1 to 5" >&2; exit 2 ;;
esac
