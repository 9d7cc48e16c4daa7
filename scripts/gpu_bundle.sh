#!/usr/bin/env bash
# Builds the CUDA test and benchmark binaries here (the GPU machine has no Debian -dev packages)
# and copies them, with the shared libraries they need beyond glibc/libstdc++, into .carry/gpu
# (git-ignored). Then, through the device tool: carry ".carry", run `bash scripts/gpu_run.sh`.
# DI_GPU_BUILD_DIR=DIR reuses binaries already built in DIR (a cuda-release build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DI_GPU_BUILD_DIR:-build/cuda-release}
if [[ -z "${DI_GPU_BUILD_DIR:-}" ]]; then
  cmake --preset cuda-release >/dev/null
  cmake --build --preset cuda-release -j "${DI_JOBS:-$(nproc)}" --target kernel_test dequant_bench
fi
rm -rf .carry/gpu && mkdir -p .carry/gpu/bin .carry/gpu/lib
bins=("${build}/tests/kernels/kernel_test" "${build}/bench/dequant_bench")
cp "${bins[@]}" .carry/gpu/bin/
for lib in $(ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u | grep -E 'libfmt|libspdlog'); do
  cp -L "${lib}" .carry/gpu/lib/
done
du -sh .carry/gpu
