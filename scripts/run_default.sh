#!/usr/bin/env bash
# The README's main command: installs dependencies, builds deepinfer and runs `deepinfer generate`
# on the embedded default model: `v41-tiny`, a tiny DeepSeek-V4.1-architecture model with RANDOM
# weights (seed 0) written once by `deepinfer synth`, with the bundled V4.1 tokenizer. The output
# text is therefore meaningless; what it shows is the whole pipeline (tokenizer, official chat
# encoding, Engram map, continuous batching, sampling, detokenization, reasoning split) working.
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
if [[ $# -gt 0 ]]; then
  exec "${bin}" "$@"
fi
"${bin}" inspect "${model}" | head -n 12
exec "${bin}" generate --model "${model}" --cache-dir build/cache --json --max-tokens 24 \
  --prompt "The capital of France is" --prompt "def fibonacci(n):" \
  --chat --temperature 0.7
