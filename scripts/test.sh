#!/usr/bin/env bash
# Builds and runs every test of DeepInfer (the README's test command; .ci/run calls it).
#  1. release build (with the CUDA backend for sm_90a when nvcc is present; GPU tests skip
#     cleanly without a GPU) -> ctest: unit, integration, kernel/gpu
#  2. ASan+UBSan build of the CPU code -> ctest: unit, integration
#  3. libFuzzer build (clang) -> bounded fuzz runs of the parsers
#  4. clang-format check of every source file
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh

JOBS=${DI_JOBS:-$(nproc)}
FUZZ_SECONDS=${DI_FUZZ_SECONDS:-60}
status=0

# Unity builds (batches of 8 C++ files per translation unit; CUDA files stay separate): the
# heavy headers (nlohmann/json, fmt, gtest) are parsed once per batch, which is most of the CPU
# build time on a 2-core machine. Developers' own builds stay per-file (fast incremental).
unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)

main_preset=cpu-release
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  main_preset=cuda-release
fi

echo "== [1/4] ${main_preset}: build + all tests"
cmake --preset "${main_preset}" "${unity[@]}" >/dev/null
cmake --build --preset "${main_preset}" -j "${JOBS}"
ctest --test-dir "build/${main_preset}" --output-on-failure -j "${JOBS}" -LE fuzz || status=1

echo "== [2/4] asan-ubsan: CPU tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake --preset asan-ubsan "${unity[@]}" >/dev/null
cmake --build --preset asan-ubsan -j "${JOBS}"
# The 24-request batch-invariance test (five engines, ~4 min under ASan) runs in stage 1 only; the
# other engine tests drive the same scheduling, preemption and sampling code under the sanitizers.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  GTEST_FILTER='-Engine.BatchInvariantAcrossSchedulingOrderAndPreemption' \
  ctest --test-dir build/asan-ubsan --output-on-failure -j "${JOBS}" -L "unit|integration" ||
  status=1

echo "== [3/4] fuzz: libFuzzer targets, ${FUZZ_SECONDS}s each"
cmake --preset fuzz -DDI_FUZZ_SECONDS="${FUZZ_SECONDS}" >/dev/null
cmake --build --preset fuzz -j "${JOBS}" --target safetensors_fuzz tokenizer_fuzz
ctest --test-dir build/fuzz --output-on-failure -L fuzz || status=1

echo "== [4/4] clang-format"
if ! git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run --Werror; then
  echo "clang-format: files above need formatting (clang-format -i)"
  status=1
fi

exit "${status}"
