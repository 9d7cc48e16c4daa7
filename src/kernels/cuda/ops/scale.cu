// Element-wise helpers: the in-place scale by one fp32 factor (x[i] = fp32(x[i] * s), one rounded
// product per element; optionally with bf16 rounding before and after) and the fp32 <-> bf16
// conversion of activations.

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/scale.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float round_to_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

template <bool kRound>
__global__ void __launch_bounds__(kThreads) scale_kernel(float* x, int64_t n, float s) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  if constexpr (kRound) {
    x[i] = round_to_bf16(__fmul_rn(round_to_bf16(x[i]), s));
  } else {
    x[i] = __fmul_rn(x[i], s);
  }
}

__global__ void __launch_bounds__(kThreads)
    narrow_kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void __launch_bounds__(kThreads)
    widen_kernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) dst[i] = __bfloat162float(src[i]);
}

}  // namespace

void convert_values(const ConvertParams& p, cudaStream_t stream) {
  DI_CHECK(p.n >= 0 && p.n <= int64_t{kThreads} * 0x7FFFFFFF, "convert_values: n {} out of range",
           p.n);
  if (p.n == 0) return;
  DI_CHECK(p.src != nullptr && p.dst != nullptr, "convert_values: null src or dst (n={})", p.n);
  const bool src_bf16 = p.src_precision == ActPrecision::kBF16;
  const bool dst_bf16 = p.dst_precision == ActPrecision::kBF16;
  if (src_bf16 == dst_bf16) {
    DI_CUDA_CHECK(cudaMemcpyAsync(p.dst, p.src, static_cast<size_t>(p.n) * (src_bf16 ? 2 : 4),
                                  cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const auto grid = static_cast<unsigned>((p.n + kThreads - 1) / kThreads);
  if (dst_bf16) {
    cuda_detail::launch_pdl(narrow_kernel, grid, kThreads, 0, stream,
                            static_cast<const float*>(p.src), static_cast<__nv_bfloat16*>(p.dst),
                            p.n);
  } else {
    cuda_detail::launch_pdl(widen_kernel, grid, kThreads, 0, stream,
                            static_cast<const __nv_bfloat16*>(p.src), static_cast<float*>(p.dst),
                            p.n);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

void scale_values(const ScaleParams& p, cudaStream_t stream) {
  DI_CHECK(p.n >= 0 && p.n <= int64_t{kThreads} * 0x7FFFFFFF, "scale_values: n {} out of range",
           p.n);
  if (p.n == 0) return;
  DI_CHECK(p.x != nullptr, "scale_values: null x (n={})", p.n);
  const auto grid = static_cast<unsigned>((p.n + kThreads - 1) / kThreads);
  cuda_detail::launch_pdl(p.round_bf16 ? scale_kernel<true> : scale_kernel<false>, grid, kThreads,
                          0, stream, p.x, p.n, p.s);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
