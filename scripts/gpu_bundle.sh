#!/usr/bin/env bash
# Builds the CUDA test and benchmark binaries here (the GPU machine has no Debian -dev packages)
# and copies them, with the shared libraries they need beyond glibc/libstdc++/CUDA, into
# .carry/gpu (git-ignored). Then, through the device tool: carry ".carry", run
# `bash scripts/gpu_run.sh`. DI_GPU_BUILD_DIR=DIR reuses binaries already built in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DI_GPU_BUILD_DIR:-build/cuda-release}
tests=(kernel_test fp8_gemm_kernel_test dense_ops_kernel_test mhc_kernel_test attention_kernel_test
       indexer_kernel_test kv_write_kernel_test moe_kernel_test engram_kernel_test
       wo_a_kernel_test)
benches=(dequant_bench fp8_gemm_bench dense_ops_bench mhc_bench attention_bench indexer_bench
         kv_write_bench moe_bench wo_a_bench)
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
for b in "${benches[@]}"; do [[ -x "${build}/bench/${b}" ]] && bins+=("${build}/bench/${b}"); done
cp "${bins[@]}" .carry/gpu/bin/
for lib in $(ldd "${bins[@]}" 2>/dev/null | awk '/=> \// {print $3}' | sort -u | grep -E 'libfmt|libspdlog'); do
  cp -L "${lib}" .carry/gpu/lib/
done
du -sh .carry/gpu
