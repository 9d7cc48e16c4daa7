#pragma once

// CUDA launcher of the FP8 e4m3 activation quantization with UE8M0 block scales
// (kernels/params/dense_ops.h). Host-only declaration; validates, never allocates or synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/dense_ops.h"

namespace di {

void act_quant(const ActQuantParams& params, cudaStream_t stream);

}  // namespace di
