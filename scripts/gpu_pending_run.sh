#!/usr/bin/env bash
# The pending device calls (docs/design/cuda_forward.md, "The next device calls"): an A/B bundle
# (scripts/gpu_ab_bundle.sh --fixture) with the variants
#   main  (main),                         attn  (main + experiments/attn-wgmma, all patches),
#   attn0 (attn-wgmma's first four patches: the unrolled kernel; attention_bench and
#          cuda_forward_bench only),      pipe  (main + experiments/fp8-prefill-pipelined),
#   woa   (main + experiments/wo-a-l2-prefetch), main0 (the main woa and pipe were built on).
# One call per phase, carry [".carry"]:
#   bash scripts/gpu_pending_run.sh 1  # attn: attention_kernel_test; attention_bench of attn
#                                      # (bf16 = wgmma, bf16-mma = mma.sync) and attn0 (wgmma)
#   bash scripts/gpu_pending_run.sh 2  # attn in the forward: fixture tests, replay-fixture bf16 /
#                                      # fp32; forward A/B at batch 1, main vs attn vs attn0,
#                                      # kernel-traced
#   bash scripts/gpu_pending_run.sh 3  # forward A/B at batch 64 main vs attn, prefill op tables
#   bash scripts/gpu_pending_run.sh 4  # fp8 A/B main vs pipe (parity, fp8_gemm_bench)
#   bash scripts/gpu_pending_run.sh 5  # woa: wo_a_kernel_test, traced batch-1 A/B main0 vs woa
#   bash scripts/gpu_pending_run.sh 6  # Nsight Compute: the wgmma attention cold (attn), the
#                                      # routed w1|w3 GEMM at batch 1, attn0's attention cold
# In that order of priority; each phase fits one call (600 s).
# Logs packed into ${OUT}/logs.tar.xz.
set -uo pipefail
# shellcheck source=scripts/gpu_carry_lib.sh
source scripts/gpu_carry_lib.sh
ab_run_setup
A=.carry/ab/attn FX=$PWD/.carry/ab/fixture
summary() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  FAILED  \] [A-Z]|worst normwise' "$1" | head -n 40; }
case "${1:-1}" in
  1)
    echo "== attn attention_kernel_test"
    timeout 400 "${A}"/attention_kernel_test > "${out}/attn_test.log" 2>&1; echo "rc $?"
    summary "${out}/attn_test.log"
    for v in attn attn0 attn; do  # the first run of a call reads slow: attn twice
      echo "== ${v} attention_bench (bf16 = wgmma, bf16-mma = mma.sync)"
      timeout 100 .carry/ab/"${v}"/attention_bench > "${out}/bench_${v}.log" 2>&1; echo "rc $?"
      grep -E '^ceilings|^\| [0-9]' "${out}/bench_${v}.log" | grep -v fp32
    done
    ;;
  2)
    echo "== attn cuda_forward_test (fixture, batched, engine, kv cache)"
    DI_FIXTURE_DIR="${FX}" timeout 200 "${A}"/cuda_forward_test \
      --gtest_filter='*TinyFixture*:*Batched*:*Engine*:*KvCache*' > "${out}/attn_cft.log" 2>&1
    echo "rc $?"; summary "${out}/attn_cft.log"
    for prec in bf16 fp32; do
      timeout 60 "${A}"/deepinfer replay-fixture "${FX}" --backend cuda --precision "${prec}" \
        --quirk intended > "${out}/attn_replay_${prec}.log" 2>&1
      echo "attn replay-fixture ${prec}: rc $? $(tail -n 1 "${out}/attn_replay_${prec}.log")"
    done
    trap - EXIT
    OUT="${out}" bash scripts/gpu_ab_run.sh --batch 1 --runs 2 --decode 16 --gpu-only \
      --trace 'sparse_attn|^blocks' main attn attn0
    ;;
  3)
    trap - EXIT
    OUT="${out}" bash scripts/gpu_ab_run.sh --batch 64 --runs 2 --decode 8 --gpu-only main attn
    ab_run_setup
    echo "== prefill op tables (main, attn)"
    for v in main attn; do
      timeout 120 .carry/ab/"${v}"/cuda_forward_bench /tmp/v41-roles --prompt 4096 --batch 2 \
        --decode 2 --bf16 --ops > "${out}/ops_${v}.log" 2>&1
      echo "-- ${v}: rc $?"; grep -E '^load' "${out}/ops_${v}.log"
      awk '/launches/{c=14} c-->0' "${out}/ops_${v}.log" | head -n 30
    done
    ;;
  4)
    trap - EXIT
    bash scripts/gpu_fp8_ab_run.sh main pipe
    ;;
  5)
    echo "== woa wo_a_kernel_test"
    timeout 120 .carry/ab/woa/wo_a_kernel_test > "${out}/woa_test.log" 2>&1; echo "rc $?"
    summary "${out}/woa_test.log"
    trap - EXIT
    OUT="${out}" bash scripts/gpu_ab_run.sh --batch 1 --runs 3 --decode 16 --gpu-only \
      --trace 'wo_a|^blocks' main0 woa
    ;;
  6)
    # Nsight Compute profiles (clocks left alone; its cache flush before each profiled launch
    # makes it cold, as in the forward): the wgmma attention at batch 1 of both attn variants,
    # the routed w1|w3 GEMM at batch 1 (28 us for 75 MB, 17.7 us at copy: the suspect of
    # cuda_forward.md's batch-1 list; the bench times w1|w3 first).
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
    ncu_pair attn_b1 attn sparse_attn_wgmma_kernel 3 attention_bench 1 bf16
    ncu_pair moe_w13_b1 main moe_expert_gemm_kernel 4 moe_bench 1
    ncu_pair attn0_b1 attn0 sparse_attn_wgmma_kernel 3 attention_bench 1 bf16
    ;;
  *) echo "gpu_pending_run: phase 1 .. 6" >&2; exit 2 ;;
esac
