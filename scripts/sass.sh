#!/usr/bin/env bash
# SASS of a CUDA object or binary on this machine, which has nvcc but no cuobjdump: fetches
# NVIDIA's cuobjdump wheel once into .cache/sass-tools (git-ignored) and prints either the whole
# SASS or, with a kernel-name pattern, an opcode histogram of the matching kernels (and, with
# --loop, of each backward-branch loop body: what one pipeline iteration issues).
#
#   bash scripts/sass.sh OBJECT                     # full SASS
#   bash scripts/sass.sh OBJECT moe_expert_gemm     # opcode counts per matching kernel
#   bash scripts/sass.sh OBJECT moe_expert_gemm --loop
set -euo pipefail
cd "$(dirname "$0")/.."
tools=.cache/sass-tools
cuobjdump=$(find "${tools}" -name cuobjdump -type f 2>/dev/null | head -n 1 || true)
if [[ -z "${cuobjdump}" ]]; then
  # cuobjdump runs nvdisasm (found beside it) for the SASS.
  mkdir -p "${tools}"
  for wheel in nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; do
    python3 -m pip download --no-deps --quiet "${wheel}" -d "${tools}"
  done
  for whl in "${tools}"/nvidia_cuda_*.whl; do python3 -m zipfile -e "${whl}" "${tools}/x"; done
  cuobjdump=$(find "${tools}/x" -name cuobjdump -type f | head -n 1)
  chmod +x "$(dirname "${cuobjdump}")"/*
fi
obj=${1:?usage: sass.sh OBJECT [KERNEL_PATTERN [--loop]]}
if [[ $# -lt 2 ]]; then
  exec "${cuobjdump}" -sass "${obj}"
fi
"${cuobjdump}" -sass "${obj}" | python3 -c '
import re, sys, collections
pattern, loops = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "--loop"
kernels, name = {}, None
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        name = m.group(1)
        kernels[name] = []
        continue
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if name and m:
        kernels[name].append((int(m.group(1), 16), m.group(2)))
def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]
for name, ins in kernels.items():
    if pattern not in name:
        continue
    spans = [(0, len(ins))]
    if loops:
        spans = []
        for i, (addr, text) in enumerate(ins):
            m = re.search(r"BRA\s+(?:\S+,\s*)?0x([0-9a-f]+)", text)
            if m and int(m.group(1), 16) < addr:
                start = next(j for j, (a, _) in enumerate(ins) if a >= int(m.group(1), 16))
                spans.append((start, i + 1))
    for lo, hi in spans:
        counts = collections.Counter(opcode(t) for _, t in ins[lo:hi])
        where = "" if not loops else " loop 0x%x-0x%x" % (ins[lo][0], ins[hi - 1][0])
        print("%s%s: %d instructions" % (name, where, hi - lo))
        print("  " + ", ".join("%s %d" % kv for kv in counts.most_common(16)))
' "${@:2}"
