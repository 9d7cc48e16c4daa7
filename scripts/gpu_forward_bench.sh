#!/usr/bin/env bash
# Runs on the GPU machine (device tool) after scripts/gpu_bundle.sh here (with deepinfer and
# cuda_forward_bench in the bundle): writes a synthetic DeepSeek-V4.1-Flash checkpoint holding a
# few layers of every role at full width (deepinfer synth --layer-ids), then the per-layer decode
# benchmark at batch 1 for 4K and 64K contexts with the extrapolation to the 40-layer model.
# Logs go to $OUT (or ./gpu-out). EXPERTS=N: routed experts kept per layer (default 384; batch 1
# touches top-6 of them, so fewer only shrink the checkpoint). CONTEXTS="4096 65536" by default.
# BENCH_FLAGS="--bf16": the bf16 precision (default: fp32 activations, tensor-core linears).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "${out}"
if [[ -f .carry/gpu.tar.xz && ! -d .carry/gpu ]]; then tar -C .carry -xJf .carry/gpu.tar.xz; fi
export LD_LIBRARY_PATH="$PWD/.carry/gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=.carry/gpu/bin
model=${MODEL_DIR:-/tmp/v41-roles}
roles=${LAYER_IDS:-0,1,2,3,14,20,21,24,25}
status=0
if [[ ! -f "${model}/config.json" ]]; then
  "${bin}/deepinfer" synth --config v41-flash --out "${model}" --layer-ids "${roles}" \
    --experts "${EXPERTS:-384}" --no-vision --draft-blocks 0 > "${out}/synth.log" 2>&1 || status=1
  tail -n 1 "${out}/synth.log"
fi
for ctx in ${CONTEXTS:-4096 65536}; do
  "${bin}/cuda_forward_bench" "${model}" --prompt "${ctx}" --decode "${DECODE:-16}" ${BENCH_FLAGS:-} \
    --extrapolate v41-flash > "${out}/cuda_forward_bench-${ctx}.log" 2>&1 || status=1
  cat "${out}/cuda_forward_bench-${ctx}.log"
done
exit "${status}"
