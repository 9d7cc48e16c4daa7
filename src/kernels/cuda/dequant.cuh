#pragma once

// CUDA launchers for the block-scaled FP8 / FP4 -> bf16 dequantization ops (kernels/ops.h).
// Host-only declarations: safe to include from .cc files. Launchers validate their Params
// (di::Error), never allocate and never synchronize; a launch failure throws via DI_CUDA_CHECK.

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

namespace di {

void dequant_fp8_to_bf16(const DequantFp8Params& params, cudaStream_t stream);
void dequant_fp4_to_bf16(const DequantFp4Params& params, cudaStream_t stream);

}  // namespace di
