#!/usr/bin/env bash
# The README's main command: installs dependencies, builds deepinfer and runs it on the embedded
# default model. Until the engine can generate, the main job is `deepinfer inspect` on a
# synthetic checkpoint of the tiny V4.1-architecture model (`v41-tiny`, random weights,
# seed 0) that this script writes once with `deepinfer synth`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release -j "${DI_JOBS:-$(nproc)}" --target deepinfer
bin=build/cpu-release/tools/deepinfer/deepinfer
model=build/models/v41-tiny
if [[ ! -f "${model}/model.safetensors.index.json" ]]; then
  rm -rf "${model}"
  "${bin}" synth --config v41-tiny --seed 0 --out "${model}"
fi
exec "${bin}" inspect "${model}" "$@"
