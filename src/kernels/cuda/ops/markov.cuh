#pragma once

// CUDA launcher of the DSpark Markov step (kernels/params/markov.h). Host-only declaration;
// validates, never allocates or synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/markov.h"

namespace di {
void markov_step(const MarkovStepParams& params, cudaStream_t stream);
}  // namespace di
