// In-place scale by one fp32 factor: x[i] = fp32(x[i] * s), one rounded product per element.

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/scale.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) scale_kernel(float* x, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(x[i], s);
}

}  // namespace

void scale_values(const ScaleParams& p, cudaStream_t stream) {
  DI_CHECK(p.n >= 0 && p.n <= int64_t{kThreads} * 0x7FFFFFFF, "scale_values: n {} out of range",
           p.n);
  if (p.n == 0) return;
  DI_CHECK(p.x != nullptr, "scale_values: null x (n={})", p.n);
  const auto grid = static_cast<unsigned>((p.n + kThreads - 1) / kThreads);
  scale_kernel<<<grid, kThreads, 0, stream>>>(p.x, p.n, p.s);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
