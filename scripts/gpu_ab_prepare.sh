#!/usr/bin/env bash
# Builds the variants of an A/B bundle here and packs them with gpu_ab_bundle.sh: each variant
# is this checkout's HEAD (commits only: uncommitted changes are not in it), optionally with one
# patch series of experiments/ applied, in its own detached worktree (.cache/ab-wt/VARIANT) and
# cuda-release build (its build/cuda-release), of the named targets only. A rerun moves the
# worktrees to the new HEAD and rebuilds only what changed.
#
#   bash scripts/gpu_ab_prepare.sh [--fixture] VARIANT[@SERIES]=target,target ...
#
# e.g. (the bundle of gpu_pending_run.sh)
#   bash scripts/gpu_ab_prepare.sh --fixture \
#     main=cuda_forward_test,deepinfer,fp8_gemm_bench,fp8_gemm_kernel_test,moe_bench \
#     pipe@fp8-prefill-pipelined=fp8_gemm_bench,fp8_gemm_kernel_test \
#     moe@moe-prefill-n64=moe_kernel_test,moe_bench
# A series that does not apply to HEAD stops the script (git am's message). DI_JOBS: parallel
# build jobs (default: the CPU count).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
fixture=()
specs=()
for arg in "$@"; do
  if [[ "${arg}" == --fixture ]]; then
    fixture=(--fixture)
  elif [[ "${arg}" =~ ^([A-Za-z0-9_-]+)(@([A-Za-z0-9_.-]+))?=([A-Za-z0-9_,]+)$ ]]; then
    # variant, series (may be empty), targets: one word each.
    specs+=("${BASH_REMATCH[1]} ${BASH_REMATCH[3]:--} ${BASH_REMATCH[4]}")
  else
    echo "gpu_ab_prepare: expected VARIANT[@SERIES]=target,target, got '${arg}'" >&2
    exit 2
  fi
done
((${#specs[@]})) || { echo "gpu_ab_prepare: name at least one variant" >&2; exit 2; }
bundle_args=("${fixture[@]}")
head=$(git rev-parse HEAD)
for spec in "${specs[@]}"; do
  read -r variant series targets <<< "${spec}"
  [[ "${series}" == - ]] && series=""
  if [[ -n "${series}" ]]; then
    compgen -G "${root}/experiments/${series}/*.patch" > /dev/null ||
      { echo "gpu_ab_prepare: no patches in experiments/${series}" >&2; exit 1; }
  fi
  wt=${root}/.cache/ab-wt/${variant}
  # The worktree moves to HEAD (files that do not change keep their times, so the build folder's
  # rebuild is incremental), or is made.
  if git -C "${wt}" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git -C "${wt}" am --abort > /dev/null 2>&1 || true
    git -C "${wt}" reset --quiet --hard
    git -C "${wt}" checkout --quiet --detach "${head}"
  else
    rm -rf "${wt}"
    git worktree prune
    mkdir -p "$(dirname "${wt}")"
    git worktree add --quiet --detach "${wt}" "${head}"
  fi
  if [[ -n "${series}" ]]; then
    git -C "${wt}" -c user.name=ab -c user.email=ab@localhost am --quiet \
      "${root}"/experiments/"${series}"/*.patch
  fi
  echo "== ${variant}: $(git -C "${wt}" log --oneline -1 | cut -c1-90)"
  IFS=, read -ra tlist <<< "${targets}"
  (cd "${wt}" && cmake --preset cuda-release > /dev/null &&
    cmake --build --preset cuda-release -j "${DI_JOBS:-$(nproc)}" --target "${tlist[@]}")
  bundle_args+=("${variant}=${wt}/build/cuda-release:${targets}")
done
bash scripts/gpu_ab_bundle.sh "${bundle_args[@]}"
