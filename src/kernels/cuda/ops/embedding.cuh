#pragma once

// CUDA launcher of the embedding gather (kernels/params/dense_ops.h). Host-only declaration;
// validates, never allocates or synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/dense_ops.h"

namespace di {

void embedding_gather(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace di
