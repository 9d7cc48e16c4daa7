#pragma once

// A kernel that keeps a stream busy for a given time (benchmarks): work queued behind it starts
// only after it, so a host can enqueue a whole step before the GPU begins, and the step's event
// times then show GPU execution without host-bound gaps.

#include <cuda_runtime_api.h>

namespace di {

// One thread spins on the GPU's global timer for `microseconds` (>= 0), then exits.
void gpu_spin(double microseconds, cudaStream_t stream);

}  // namespace di
