#!/usr/bin/env bash
# Runs on the GPU machine (device tool, carry [".carry"]) after scripts/gpu_ab_bundle.sh here:
# the forward benchmark of each variant, alternated, after one discarded warm-up run (the first
# run of a call reads up to 17 % slow), on the synthetic nine-layer V4.1-Flash checkpoint
# (written once with the first variant's deepinfer). Logs to $OUT (or ./gpu-out); prints each
# run's blocks line.
#
#   bash scripts/gpu_ab_run.sh [--parity V] [--batch B] [--runs N] [--decode N] [--gpu-only]
#                              [--trace REGEX] VARIANT...
#
# --parity V first runs variant V's bundled *_test binaries and, with the fixture bundled
# (gpu_ab_bundle.sh --fixture), `deepinfer replay-fixture --backend cuda` for fp32 (both index-key
# behaviours) and bf16 (the GPU drafter), and both again with the CPU drafter (--dspark-cpu); a failure is reported
# in the exit status, the benchmarks still run.
# (GTEST_FILTER in the environment applies to every test binary; without it cuda_forward_test
# leaves out its three production-dimension tests, minutes each on the CPU reference.)
# --trace REGEX adds --kernel-trace to every run (the CSV beside its log) and prints the rows of
# its kernel table whose kernel name matches REGEX.
# On exit the logs are packed into one archive, ${OUT}/logs.tar.xz, each cut to its first 4 MiB
# (a failing test can print whole vectors): the device tool returns at most 8 files a call.
set -uo pipefail
source scripts/gpu_carry_lib.sh
ab_run_setup
batch=1 runs=2 decode=32 extra=() variants=() parity="" trace=""
while (($#)); do
  case "$1" in
    --parity) parity=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --decode) decode=$2; shift 2 ;;
    --gpu-only) extra+=(--gpu-only); shift ;;
    --trace) trace=$2; shift 2 ;;
    *) variants+=("$1"); shift ;;
  esac
done
((${#variants[@]})) || { echo "gpu_ab_run: name at least one variant" >&2; exit 2; }
status=0
if [[ -n "${parity}" ]]; then
  fx=.carry/ab/fixture
  for t in .carry/ab/"${parity}"/*_test; do
    [[ -x "${t}" ]] || continue
    log="${out}/$(basename "${t}")-${parity}.log"
    filter=${GTEST_FILTER:-}
    if [[ -z "${filter}" && "$(basename "${t}")" == cuda_forward_test ]]; then
      # The three production-dimension tests run CPU references of minutes each (the
      # twenty-sixth session's parity call spent 400 s in the first two): run them on purpose,
      # with GTEST_FILTER, not in every A/B call.
      filter='-*AtProductionAttentionDims*:*TensorCoreLinearsStayCloseToCpu'
    fi
    vars=(DI_FIXTURE_DIR="$PWD/${fx}")
    [[ -n "${filter}" ]] && vars+=(GTEST_FILTER="${filter}")
    env "${vars[@]}" "${t}" > "${log}" 2>&1 || status=1
    echo "${parity} $(basename "${t}"): $(grep -E '^\[  (PASSED|FAILED)  \]' "${log}" | tr '\n' ' ')"
  done
  if [[ -d "${fx}" && -x .carry/ab/"${parity}"/deepinfer ]]; then
    for run in "fp32 intended" "fp32 shipped" "bf16 intended" "fp32 intended --dspark-cpu" \
               "bf16 intended --dspark-cpu"; do
      read -r prec quirk flag <<< "${run}"
      log="${out}/replay-${parity}-${prec}-${quirk}${flag:+-dspark-cpu}.log"
      # shellcheck disable=SC2086
      .carry/ab/"${parity}"/deepinfer replay-fixture "${fx}" --backend cuda --precision "${prec}" \
        --quirk "${quirk}" ${flag} > "${log}" 2>&1 || status=1
      echo "${parity} replay-fixture ${prec} ${quirk} ${flag}: $(tail -n 1 "${log}")"
    done
  fi
fi
model=${MODEL_DIR:-/tmp/v41-roles}
if [[ ! -f "${model}/config.json" ]]; then
  .carry/ab/"${variants[0]}"/deepinfer synth --config v41-flash --out "${model}" \
    --layer-ids "${GPU_ROLES_LAYER_IDS}" --experts 32 --no-vision --draft-blocks 0 \
    > "${out}/synth.log" 2>&1 || { tail -n 3 "${out}/synth.log"; exit 1; }
fi
args=("${model}" --prompt 4096 --batch "${batch}" --decode "${decode}" --bf16
      --extrapolate v41-flash "${extra[@]}")
.carry/ab/"${variants[0]}"/cuda_forward_bench "${args[@]}" > "${out}/warm-up.log" 2>&1
for ((r = 1; r <= runs; ++r)); do
  for v in "${variants[@]}"; do
    log="${out}/forward-b${batch}-${v}-${r}.log" targs=()
    [[ -n "${trace}" ]] && targs=(--kernel-trace "${out}/trace-b${batch}-${v}-${r}.csv")
    .carry/ab/"${v}"/cuda_forward_bench "${args[@]}" "${targs[@]}" > "${log}" 2>&1 || status=1
    echo "${v} run ${r}: $(grep -E '^blocks' "${log}")"
    [[ -n "${trace}" ]] && grep -E "${trace}" "${log}" | grep -vE '^blocks'
  done
done
exit "${status}"
