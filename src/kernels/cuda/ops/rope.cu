// RoPE (kernels/params/dense_ops.h), one CTA per row: the row's rope_dim/2 (cos, sin) pairs are
// computed once into shared memory (angle = fp32(pos) * freq in fp32, then cos/sin evaluated in
// double and rounded to fp32: the correctly rounded value but for ~2^-29 of inputs, like glibc's
// cosf/sinf on the CPU), then every head's pairs are rotated with unfused fp32 products and
// differences, exactly the CPU's a*c - b*s and a*s + b*c. Memory-bound: the rope tails are read
// and written once.

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/ops/rope.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHalf = 256;  // rope_dim <= 512

struct Pair {
  float a, b;
};
__device__ __forceinline__ Pair load_pair(const float* p) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  return {v.x, v.y};
}
__device__ __forceinline__ Pair load_pair(const uint16_t* p) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
  return {__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u)};
}
__device__ __forceinline__ void store_pair(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store_pair(uint16_t* p, float a, float b) {
  *reinterpret_cast<uint32_t*>(p) = ops_detail::pack_bf16x2(a, b);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(T* x, const int64_t* positions, const float* freqs, int64_t heads, int64_t head_dim,
                int half, int64_t x_stride, bool inverse) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ float cos_s[kMaxHalf];
  __shared__ float sin_s[kMaxHalf];
  const int64_t row = blockIdx.x;
  for (int i = static_cast<int>(threadIdx.x); i < half; i += kThreads) {
    const float2 cs = ops_detail::rope_cos_sin(positions[row], freqs[i]);
    cos_s[i] = cs.x;
    sin_s[i] = inverse ? -cs.y : cs.y;
  }
  __syncthreads();
  T* base = x + row * x_stride + (head_dim - 2 * half);
  const int64_t pairs = heads * half;
  for (int64_t p = threadIdx.x; p < pairs; p += kThreads) {
    const int64_t h = p / half;
    const int i = static_cast<int>(p - h * half);
    T* ptr = base + h * head_dim + 2 * i;
    const Pair v = load_pair(ptr);
    const float2 r = ops_detail::rope_rotate(v.a, v.b, cos_s[i], sin_s[i]);
    store_pair(ptr, r.x, r.y);
  }
}

}  // namespace

void apply_rope(const RopeApplyParams& p, cudaStream_t stream) {
  const int64_t stride = p.x_stride != 0 ? p.x_stride : p.heads * p.head_dim;
  DI_CHECK(p.rows >= 0 && p.rows <= INT32_MAX && p.heads > 0,
           "apply_rope: bad shape [rows {}, heads {}]", p.rows, p.heads);
  DI_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= 2 * kMaxHalf &&
               p.rope_dim <= p.head_dim && p.head_dim % 2 == 0,
           "apply_rope: rope_dim {} must be even, <= {} and <= head_dim {} (even)", p.rope_dim,
           2 * kMaxHalf, p.head_dim);
  DI_CHECK(stride >= p.heads * p.head_dim && stride % 2 == 0,
           "apply_rope: row stride {} must be even and >= heads {} * head_dim {}", stride, p.heads,
           p.head_dim);
  if (p.rows == 0) return;
  const uintptr_t pair_bytes = p.precision == ActPrecision::kF32 ? 8 : 4;
  DI_CHECK(p.x != nullptr && p.positions != nullptr && p.freqs != nullptr,
           "apply_rope: null x/positions/freqs ({} rows)", p.rows);
  DI_CHECK(reinterpret_cast<uintptr_t>(p.x) % pair_bytes == 0,
           "apply_rope: x must be {}-byte aligned", pair_bytes);
  const auto half = static_cast<int>(p.rope_dim / 2);
  const auto grid = static_cast<unsigned>(p.rows);
  if (p.precision == ActPrecision::kF32) {
    cuda_detail::launch_pdl(rope_kernel<float>, grid, kThreads, 0, stream, static_cast<float*>(p.x),
                            p.positions, p.freqs, p.heads, p.head_dim, half, stride, p.inverse);
  } else {
    cuda_detail::launch_pdl(rope_kernel<uint16_t>, grid, kThreads, 0, stream,
                            static_cast<uint16_t*>(p.x), p.positions, p.freqs, p.heads, p.head_dim,
                            half, stride, p.inverse);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
