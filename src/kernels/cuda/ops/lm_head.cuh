#pragma once

// CUDA launcher of the LM head (bf16 weights x fp32 rows -> fp32 logits,
// kernels/params/dense_ops.h). Host-only declaration; validates, never allocates or synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/dense_ops.h"

namespace di {

void lm_head(const LmHeadParams& params, cudaStream_t stream);

}  // namespace di
