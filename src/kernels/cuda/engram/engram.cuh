#pragma once

// CUDA launchers of the Engram ops (kernels/params/engram.h). Host-only declarations; the
// launchers validate (di::Error naming the op and sizes), never allocate or synchronize.

#include <cuda_runtime_api.h>

#include "kernels/params/engram.h"

namespace di {

// Staged FP8 table rows (engram/row_gather.h layout) -> their exact values as activations.
void engram_decode_rows(const EngramDecodeParams& params, cudaStream_t stream);

// Engram gates and h += gate * value, in place, one CTA per (row, hc stream).
void engram_gate_mix(const EngramGateMixParams& params, cudaStream_t stream);

}  // namespace di
