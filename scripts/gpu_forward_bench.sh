#!/usr/bin/env bash
# Runs on the GPU machine (device tool) after scripts/gpu_bundle.sh here (with deepinfer and
# cuda_forward_bench in the bundle): writes a synthetic DeepSeek-V4.1-Flash checkpoint holding a
# few layers of every role at full width (deepinfer synth --layer-ids), then the per-layer decode
# benchmark for each RUN (CONTEXT:BATCH) with the extrapolation to the 40-layer model, and
# (EXPERT_LAYERS) a few layers with all 384 routed experts at batches 1, 8 and 64, which checks
# the extrapolation's expert-traffic estimate. Logs go to $OUT (or ./gpu-out), packed on exit
# into logs.tar.xz.
#   EXPERTS=N         routed experts kept per layer in the all-roles checkpoint (default 32: nine
#                     layers with 384 experts need ~76 GB of disk; the bench then adds the full
#                     model's extra expert bytes as a labelled estimate at batch > 1)
#   RUNS="C:B ..."    default "4096:1 65536:1 4096:8 1024:64 256:256" (the prompts of a batch are
#                     prefilled one sequence per call: batch x context tokens of prefill)
#   BENCH_FLAGS=...   default "--bf16 --ops"; "" = fp32 activations (tensor-core linears)
#   EXPERT_LAYERS=... default "0,2,3" (23 GB); "" skips the 384-expert runs
#   DSPARK_STEPS=N    default "" (skipped): N GPU drafting steps (cuda_forward_bench --dspark) on a
#                     checkpoint of layers 0-2 (three taps) with 128 experts and the three DSpark
#                     stages with theirs (~20 GB), against the draft step's weight-bytes floor
set -uo pipefail
source scripts/gpu_carry_lib.sh
out=${OUT:-gpu-out}
mkdir -p "${out}"
trap 'pack_out_logs "${out}"' EXIT  # one archive: the device returns at most 8 files
if [[ -f .carry/gpu.tar.xz && ! -d .carry/gpu ]]; then tar -C .carry -xJf .carry/gpu.tar.xz; fi
export LD_LIBRARY_PATH="$PWD/.carry/gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=.carry/gpu/bin
flags=${BENCH_FLAGS---bf16 --ops}
status=0
synth() {  # DIR LAYER_IDS EXPERTS [DRAFT_BLOCKS]
  [[ -f "$1/config.json" ]] && return 0
  "${bin}/deepinfer" synth --config v41-flash --out "$1" --layer-ids "$2" --experts "$3" \
    --no-vision --draft-blocks "${4:-0}" > "${out}/synth-$(basename "$1").log" 2>&1 || status=1
  tail -n 1 "${out}/synth-$(basename "$1").log"
}
model=${MODEL_DIR:-/tmp/v41-roles}
synth "${model}" "${LAYER_IDS:-${GPU_ROLES_LAYER_IDS}}" "${EXPERTS:-32}"
for run in ${RUNS:-4096:1 65536:1 4096:8 1024:64 256:256}; do
  ctx=${run%%:*} batch=${run##*:}
  log="${out}/cuda_forward_bench-${ctx}x${batch}.log"
  # shellcheck disable=SC2086
  "${bin}/cuda_forward_bench" "${model}" --prompt "${ctx}" --batch "${batch}" \
    --decode "${DECODE:-16}" ${flags} --extrapolate v41-flash > "${log}" 2>&1 || status=1
  grep -E "^load|^blocks|decode step|estimate" "${log}"
done
if [[ -n "${EXPERT_LAYERS-0,2,3}" ]]; then
  rm -rf "${model}"  # the disk holds one of the two
  full=/tmp/v41-384
  synth "${full}" "${EXPERT_LAYERS-0,2,3}" 384
  for batch in 1 8 64; do
    log="${out}/cuda_forward_bench-384e-${batch}.log"
    # shellcheck disable=SC2086
    "${bin}/cuda_forward_bench" "${full}" --prompt "$((batch > 8 ? 1024 : 4096))" \
      --batch "${batch}" --decode "${DECODE:-16}" ${flags} > "${log}" 2>&1 || status=1
    grep -E "^load|^blocks" "${log}"
  done
fi
if [[ -n "${DSPARK_STEPS:-}" ]]; then
  rm -rf "${model}" /tmp/v41-384
  draft=/tmp/v41-dspark
  synth "${draft}" 0,1,2 128 3
  for flags_d in "--bf16" ""; do
    log="${out}/cuda_forward_bench-dspark${flags_d:+-bf16}.log"
    # shellcheck disable=SC2086
    "${bin}/cuda_forward_bench" "${draft}" --prompt 4096 --decode 4 ${flags_d} \
      --dspark "${DSPARK_STEPS}" > "${log}" 2>&1 || status=1
    grep -E "^load|^dspark step" "${log}"
  done
fi
exit "${status}"
