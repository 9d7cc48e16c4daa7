#pragma once

// Programmatic dependent launch (PDL, sm_90+). A kernel launched with launch_pdl may be scheduled
// before the previous kernel in its stream has finished (once every CTA of that kernel has
// called pdl_launch_dependents, or exited): its launch and CTA setup overlap the predecessor's
// tail instead of following it. Contract of every kernel launched this way: each thread calls
// pdl_wait() before it touches global memory that earlier work in the stream writes or reads
// (pdl_wait returns when the predecessor grid has completed and its memory is visible; the
// predecessor itself waited for its own predecessor, so the whole stream order holds). Kernels
// here call pdl_wait() first thing, then pdl_launch_dependents(): only the launch latency
// overlaps, never the work. Without the launch attribute both instructions are no-ops.
// Measured alternatives (H200, V4.1 decode step at batch 1, docs/PERF.md 2026-12-01 tenth
// session): triggering the dependents before the wait, with the weight kernels (FP8 GEMM,
// wo_a, mhc_pre's fn) prefetching their weights into L2 before their wait, made the step 9 %
// slower; the L2 prefetches alone, 2 %. Fusing a short second pass into the first one's tail
// (mhc_pre's finalize run by the last CTA of each token tile) was slower than the PDL launch.

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"

namespace di::cuda_detail {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The launch attribute of programmatic stream serialization, for cudaLaunchKernelEx configs
// that carry other attributes too (clusters).
inline cudaLaunchAttribute pdl_attribute() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization; the
// kernel must follow the contract above. Launch errors throw (DI_CUDA_CHECK).
template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr = pdl_attribute();
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace di::cuda_detail
