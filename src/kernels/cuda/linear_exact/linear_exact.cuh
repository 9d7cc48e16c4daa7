#pragma once

// CUDA launchers of the exact-order linear layers (kernels/params/linear_exact.h). Host-only
// declarations; launchers validate (di::Error naming the op and sizes), never allocate, never
// synchronize.

#include <cuda_runtime_api.h>

#include "kernels/params/linear_exact.h"

namespace di {

void linear_exact(const LinearExactParams& params, cudaStream_t stream);
void grouped_linear_exact(const GroupedLinearExactParams& params, cudaStream_t stream);

}  // namespace di
