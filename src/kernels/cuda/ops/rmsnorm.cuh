#pragma once

// CUDA launchers of RMSNorm and RMSNorm fused with the FP8 activation quantization
// (kernels/params/dense_ops.h). Host-only declarations. Launchers validate their Params
// (di::Error naming the op and sizes), never allocate and never synchronize.

#include <cuda_runtime_api.h>

#include "kernels/params/dense_ops.h"

namespace di {

void rms_norm(const RmsNormParams& params, cudaStream_t stream);
void rms_norm_act_quant(const RmsNormQuantParams& params, cudaStream_t stream);

}  // namespace di
