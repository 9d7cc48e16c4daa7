#!/usr/bin/env bash
# Runs on the GPU machine (device tool, carry [".carry"]) after scripts/gpu_ab_bundle.sh here with
# fp8_gemm_bench (and fp8_gemm_kernel_test) in each variant, e.g.
#   bash scripts/gpu_ab_bundle.sh main=BUILD_A:fp8_gemm_bench,fp8_gemm_kernel_test \
#                                 new=BUILD_B:fp8_gemm_bench,fp8_gemm_kernel_test
# First every variant's fp8_gemm_kernel_test (parity at every model shape, rows bitwise batch
# invariant), then `fp8_gemm_bench SHAPES M` of the variants alternated, twice, for each M (the
# first run of a call is discarded: it reads slow). Prints each run's ceilings line and table rows
# (shape, M, tile, act_quant + GEMM us, GEMM us, act_quant us, TFLOP/s, % of FP8 peak, weight
# GB/s, % of copy); logs packed into ${OUT}/logs.tar.xz.
#
#   bash scripts/gpu_fp8_ab_run.sh [--shapes FILTER] [--m M[,M...]] VARIANT...
#
# Defaults: every shape (FILTER ""), M = 4096,256.
set -uo pipefail
source scripts/gpu_carry_lib.sh
ab_run_setup
shapes="" ms=4096,256 variants=()
while (($#)); do
  case "$1" in
    --shapes) shapes=$2; shift 2 ;;
    --m) ms=$2; shift 2 ;;
    *) variants+=("$1"); shift ;;
  esac
done
((${#variants[@]})) || { echo "gpu_fp8_ab_run: name at least one variant" >&2; exit 2; }
status=0
for v in "${variants[@]}"; do
  t=.carry/ab/${v}/fp8_gemm_kernel_test
  [[ -x "${t}" ]] || continue
  log="${out}/fp8_gemm_kernel_test-${v}.log"
  timeout 300 "${t}" > "${log}" 2>&1 || status=1
  echo "${v} fp8_gemm_kernel_test: $(grep -E '^\[  (PASSED|FAILED)  \]' "${log}" | tr '\n' ' ')"
  grep -E 'rows differ' "${log}" | grep -v ': 0 of' | head -n 5
done
rows() {
  grep -E '^# ceilings' "$1"
  grep -E '^\| (v4|v41)_' "$1" | awk -F'|' '{print $2, $5, $6, $7, $8, $9, $10, $11, $12, $13}'
}
for m in ${ms//,/ }; do
  timeout 120 .carry/ab/"${variants[0]}"/fp8_gemm_bench "${shapes}" "${m}" > "${out}/warm-up-${m}.log" 2>&1
  for r in 1 2; do
    for v in "${variants[@]}"; do
      log="${out}/fp8-bench-m${m}-${v}-${r}.log"
      timeout 120 .carry/ab/"${v}"/fp8_gemm_bench "${shapes}" "${m}" > "${log}" 2>&1 || status=1
      echo "-- ${v}, M ${m}, run ${r}"
      rows "${log}"
    done
  done
done
exit "${status}"
