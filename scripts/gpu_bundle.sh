#!/usr/bin/env bash
# Builds the CUDA test and benchmark binaries here (the GPU machine has no Debian -dev packages)
# and copies them, with the shared libraries they need beyond glibc/libstdc++/CUDA, into
# .carry/gpu.tar.xz (git-ignored). Then, through the device tool: carry ".carry", run
# `bash scripts/gpu_run.sh`. DI_GPU_BUILD_DIR=DIR reuses binaries already built in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_carry_lib.sh
build=${DI_GPU_BUILD_DIR:-build/cuda-release}
# DI_GPU_TESTS="a b": only these test binaries (a smaller carry).
default_tests="kernel_test fp8_gemm_kernel_test dense_ops_kernel_test mhc_kernel_test
  attention_kernel_test indexer_kernel_test kv_write_kernel_test moe_kernel_test
  engram_kernel_test wo_a_kernel_test cuda_forward_test"
read -r -a tests <<< "$(echo ${DI_GPU_TESTS:-${default_tests}})"
default_benches="dequant_bench fp8_gemm_bench dense_ops_bench mhc_bench attention_bench
  indexer_bench kv_write_bench moe_bench wo_a_bench cuda_forward_bench"
# DI_GPU_BENCHES="a b": only these benchmarks.
read -r -a benches <<< "$(echo ${DI_GPU_BENCHES:-${default_benches}})"
if [[ -z "${DI_GPU_BUILD_DIR:-}" ]]; then
  cmake --preset cuda-release >/dev/null
  targets=()
  for t in "${tests[@]}" "${benches[@]}"; do
    if cmake --build --preset cuda-release --target help | grep -q "^${t}:"; then targets+=("${t}"); fi
  done
  cmake --build --preset cuda-release -j "${DI_JOBS:-$(nproc)}" --target "${targets[@]}"
fi
rm -rf .carry/gpu && mkdir -p .carry/gpu/bin .carry/gpu/lib
bins=()
for t in "${tests[@]}"; do [[ -x "${build}/tests/kernels/${t}" ]] && bins+=("${build}/tests/kernels/${t}"); done
if [[ -z "${DI_GPU_NO_BENCH:-}" ]]; then  # DI_GPU_NO_BENCH=1: tests only (smaller carry)
  for b in "${benches[@]}"; do [[ -x "${build}/bench/${b}" ]] && bins+=("${build}/bench/${b}"); done
fi
# The CLI (replay-fixture --backend cuda) and the tiny golden fixture it replays.
[[ -x "${build}/tools/deepinfer/deepinfer" ]] && bins+=("${build}/tools/deepinfer/deepinfer")
cp "${bins[@]}" .carry/gpu/bin/
# DI_GPU_NO_FIXTURE=1 leaves the fixture out (~20 MB compressed: a smaller carry).
if [[ -d ../shared/fixtures/v41-tiny-a && -z "${DI_GPU_NO_FIXTURE:-}" ]]; then
  copy_tiny_fixture .carry/gpu/fixtures/v41-tiny-a trace.safetensors
fi
copy_carry_libs .carry/gpu/lib "${bins[@]}"
# One xz archive (the binaries compress ~3x): a device call carries at most 64 MiB with the tree.
# scripts/gpu_run.sh unpacks it. DI_GPU_BUNDLE_KEEP=1 keeps the unpacked directory here.
tar -C .carry -cf - gpu | xz -T"${DI_JOBS:-$(nproc)}" -6 > .carry/gpu.tar.xz
[[ -n "${DI_GPU_BUNDLE_KEEP:-}" ]] || rm -rf .carry/gpu
du -sh .carry/gpu.tar.xz
