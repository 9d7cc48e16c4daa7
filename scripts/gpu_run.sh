#!/usr/bin/env bash
# Runs on the GPU machine (device tool) from the repo root, after scripts/gpu_bundle.sh here:
# every kernel parity test binary, then every kernel benchmark. Logs go to $OUT (or ./gpu-out),
# packed on exit into one archive, logs.tar.xz (gpu_carry_lib.sh, pack_out_logs).
# `bash scripts/gpu_run.sh fp8_gemm` runs only the binaries whose name contains fp8_gemm.
set -uo pipefail
out=${OUT:-gpu-out}
if [[ -f .carry/gpu.tar.xz && ! -d .carry/gpu ]]; then tar -C .carry -xJf .carry/gpu.tar.xz; fi
mkdir -p "${out}"
source scripts/gpu_carry_lib.sh
trap 'pack_out_logs "${out}"' EXIT  # one archive: the device returns at most 8 files
cuda_libs=$(ls -d /usr/local/cuda/lib64 2>/dev/null; python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/.carry/gpu/lib:$(echo ${cuda_libs} | tr ' ' ':')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "${out}/gpu.txt"
filter=${1:-}
status=0
for t in .carry/gpu/bin/*_test; do
  name=$(basename "${t}")
  [[ "${name}" == *"${filter}"* ]] || continue
  DI_FIXTURE_DIR="$PWD/.carry/gpu/fixtures/v41-tiny-a" "${t}" --gtest_output="xml:${out}/${name}.xml" > "${out}/${name}.log" 2>&1 || status=1
  tail -n 3 "${out}/${name}.log"
done
# The golden fixture through the CUDA forward (fp32 rule, both index-key behaviours).
if [[ -x .carry/gpu/bin/deepinfer && -d .carry/gpu/fixtures/v41-tiny-a && "replay-fixture" == *"${filter}"* ]]; then
  for quirk in intended shipped; do
    .carry/gpu/bin/deepinfer replay-fixture .carry/gpu/fixtures/v41-tiny-a --backend cuda \
      --precision fp32 --quirk "${quirk}" > "${out}/replay-fixture-cuda-${quirk}.log" 2>&1 || status=1
    tail -n 4 "${out}/replay-fixture-cuda-${quirk}.log"
  done
fi
for b in .carry/gpu/bin/*_bench; do
  [[ -x "${b}" ]] || continue
  name=$(basename "${b}")
  [[ "${name}" == *"${filter}"* ]] || continue
  "${b}" > "${out}/${name}.log" 2>&1 || status=1
  tail -n 30 "${out}/${name}.log"
done
exit "${status}"
