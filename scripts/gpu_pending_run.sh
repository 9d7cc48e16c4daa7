#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): an A/B bundle
# with the variants
#   main   (main: indexer_kernel_test, indexer_bench),
#   chains (main + experiments/indexer-decode-chains: the same targets),
#   ctas5  (main + experiments/indexer-decode-5ctas: the same targets).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 1  # chains and ctas5: indexer_kernel_test (scores bitwise the
#                                      # CPU's); indexer_bench score alternated with main; the
#                                      # warp stalls of both at 64 rows
#   bash scripts/gpu_pending_run.sh 2  # the same, trimmed: the decode tests, indexer_bench score
#                                      # 64 / 8 / 1 alternated (a short device budget)
# The bundle, built here:
#   bash scripts/gpu_ab_prepare.sh main=indexer_kernel_test,indexer_bench \
#     chains@indexer-decode-chains=indexer_kernel_test,indexer_bench \
#     ctas5@indexer-decode-5ctas=indexer_kernel_test,indexer_bench
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
    for v in chains ctas5; do
      echo "== ${v} indexer_kernel_test"
      timeout 300 .carry/ab/"${v}"/indexer_kernel_test --gtest_filter='IndexerKernel.*Score*' \
        > "${out}/${v}_test.log" 2>&1
      echo "rc $?"; summary "${out}/${v}_test.log"
    done
    timeout 60 "${M}"/indexer_bench score > "${out}/idx_warm-up.log" 2>&1
    for r in 1 2; do
      for v in main chains ctas5; do
        timeout 120 .carry/ab/"${v}"/indexer_bench score > "${out}/idx_bench_${v}_${r}.log" 2>&1
        echo "-- ${v} run ${r}: rc $?"; grep -E '^score|^ceiling' "${out}/idx_bench_${v}_${r}.log"
      done
    done
    for v in chains ctas5; do
      GPU_BIN_DIR=.carry/ab/${v} GPU_LIB_DIR=.carry/ab/lib timeout 120 \
        bash scripts/gpu_ncu_stalls.sh indexer_score_decode_kernel 3 indexer_bench score 64 \
        > "${out}/stalls-${v}_b64.txt"
      echo "-- ${v} stalls"
      grep -E 'time_duration|inst_executed|issue_active|long_scoreboard|wait|math_pipe|not_sel' \
        "${out}/stalls-${v}_b64.txt"
    done
    ;;
  2)
    # Phase 1 trimmed to the decode cases that matter (for a short device budget).
    for v in chains ctas5; do
      timeout 60 .carry/ab/"${v}"/indexer_kernel_test --gtest_filter='IndexerKernel.Decode*' \
        > "${out}/${v}_test.log" 2>&1
      echo "== ${v} indexer_kernel_test Decode*: rc $?"; summary "${out}/${v}_test.log"
    done
    for r in 1 2; do
      for v in main chains ctas5; do
        for rows in 64 8 1; do
          timeout 30 .carry/ab/"${v}"/indexer_bench score "${rows}" \
            > "${out}/idx_bench_${v}_${rows}_${r}.log" 2>&1
          echo "-- ${v} run ${r}: $(grep -E '^score' "${out}/idx_bench_${v}_${rows}_${r}.log")"
        done
      done
    done
    ;;
  *) echo "gpu_pending_run: phase 1 or 2" >&2; exit 2 ;;
esac
