#!/usr/bin/env bash
# A/B bundle for the GPU machine: the same binaries from several builds (variants), one xz
# archive .carry/ab.tar.xz (git-ignored; xz -9 with one dictionary stores near-identical
# binaries of two variants for little more than one). Then, through the device tool with carry
# [".carry"], `bash scripts/gpu_ab_run.sh ...` runs them alternated in one call (compare only
# within a call: the forward's blocks move ~3 % from call to call).
#
#   bash scripts/gpu_ab_bundle.sh [--fixture] NAME=BUILD_DIR[:bin,bin...] ...
#
# Default binaries: cuda_forward_bench deepinfer moe_bench. --fixture adds the tiny golden
# fixture (for cuda_forward_test / replay-fixture). A call carries at most 64 MiB with the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_carry_lib.sh
stage=.carry/ab
rm -rf "${stage}" .carry/ab.tar.xz
mkdir -p "${stage}/lib"
fixture=0
for arg in "$@"; do
  if [[ "${arg}" == --fixture ]]; then fixture=1; continue; fi
  [[ "${arg}" == *=* ]] || { echo "gpu_ab_bundle: expected NAME=BUILD_DIR[:bins], got '${arg}'" >&2; exit 2; }
  name=${arg%%=*} rest=${arg#*=}
  dir=${rest%%:*} bins=cuda_forward_bench,deepinfer,moe_bench
  [[ "${rest}" == *:* ]] && bins=${rest#*:}
  mkdir -p "${stage}/${name}"
  for b in ${bins//,/ }; do
    f=$(find "${dir}" -maxdepth 3 -type f -name "${b}" -perm -u+x | head -n 1)
    [[ -n "${f}" ]] || { echo "gpu_ab_bundle: no executable ${b} under ${dir}" >&2; exit 1; }
    cp "${f}" "${stage}/${name}/"
  done
done
copy_carry_libs "${stage}/lib" "${stage}"/*/*
if ((fixture)); then copy_tiny_fixture "${stage}/fixture"; fi
tar -C .carry -cf - ab | xz -9 -T1 > .carry/ab.tar.xz
rm -rf "${stage}"
du -sh .carry/ab.tar.xz
