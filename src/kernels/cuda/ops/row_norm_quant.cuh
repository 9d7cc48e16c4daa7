#pragma once

// The one row kernel behind rms_norm, rms_norm_act_quant and act_quant (device code; include from
// .cu files). One CTA per row; thread t owns the 4-element chunks t, t + kThreads, ... of the row,
// held in registers between the reduction and the writes. Every row is computed with the same
// arithmetic whatever the number of rows (the CTA size depends on dim only):
//   sum of squares: per thread in chunk order (fma), then a fixed xor tree over the warp, then the
//   warps' partials added in warp order by every thread;
//   act_quant blocks: a block of `block` columns is block/4 consecutive chunks, held by
//   block/4 consecutive lanes of one warp (aligned), whose amax is an xor-shuffle max.

#include <cstdint>

#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di::ops_detail {

inline constexpr int kRowMaxChunks = 8;  // chunks per thread: dim <= 4 * 8 * kThreads

struct RowKernelArgs {
  const void* x;
  const float* weight;
  void* y;
  uint8_t* codes;
  uint8_t* scales;
  uint8_t* codes_interleaved;  // nullable (block 32): RmsNormQuantParams::codes_interleaved
  int64_t dim;
  int64_t x_stride;
  int64_t y_stride;
  float eps;
  int block;
};

template <typename T, int kThreads, bool kNorm, bool kQuant>
__global__ void __launch_bounds__(kThreads) row_norm_quant_kernel(RowKernelArgs a) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_sums[kWarps];
  const int64_t row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int chunks = static_cast<int>(a.dim / 4);
  const T* x = static_cast<const T*>(a.x) + row * a.x_stride;

  float4 v[kRowMaxChunks];
#pragma unroll
  for (int j = 0; j < kRowMaxChunks; ++j) {
    const int c = tid + j * kThreads;
    v[j] = c < chunks ? load4(x + 4 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }

  if constexpr (kNorm) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowMaxChunks; ++j) {
      ss = fmaf(v[j].x, v[j].x, ss);
      ss = fmaf(v[j].y, v[j].y, ss);
      ss = fmaf(v[j].z, v[j].z, ss);
      ss = fmaf(v[j].w, v[j].w, ss);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) warp_sums[tid / 32] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      total += warp_sums[w];
    // 1 / sqrt(mean + eps) with IEEE division and square root, as the reference.
    const float s =
        __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, static_cast<float>(a.dim)), a.eps)));
    T* y = static_cast<T*>(a.y);
    if (y != nullptr) y += row * a.y_stride;
#pragma unroll
    for (int j = 0; j < kRowMaxChunks; ++j) {
      const int c = tid + j * kThreads;
      float4 n = make_float4(__fmul_rn(v[j].x, s), __fmul_rn(v[j].y, s), __fmul_rn(v[j].z, s),
                             __fmul_rn(v[j].w, s));
      if (a.weight != nullptr && c < chunks) {
        const float4 w = *reinterpret_cast<const float4*>(a.weight + 4 * c);
        n = make_float4(__fmul_rn(w.x, n.x), __fmul_rn(w.y, n.y), __fmul_rn(w.z, n.z),
                        __fmul_rn(w.w, n.w));
      }
      if constexpr (kQuant) {
        // The quantized value is that of the stored row: round to bf16 first for bf16 storage.
        if constexpr (sizeof(T) == 2) n = load4_rounded_bf16(n);
      }
      v[j] = n;
      if (y != nullptr && c < chunks) store4(y + 4 * c, n);
    }
  }

  if constexpr (kQuant) {
    const int group = a.block / 4;  // lanes per quant block: 1..32, a power of two
    const int64_t blocks_per_row = a.dim / a.block;
    uint8_t* codes = a.codes + row * a.dim;
    uint8_t* scales = a.scales + row * blocks_per_row;
#pragma unroll
    for (int j = 0; j < kRowMaxChunks; ++j) {
      if (j * kThreads >= chunks) break;  // uniform over the CTA: keeps the shuffles converged
      const int c = tid + j * kThreads;
      float amax = abs_max4(v[j]);
      for (int off = group / 2; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      const uint32_t byte = act_scale_byte(amax);
      const float inv = inv_scale_from_byte(byte);
      if (c < chunks) {
        const float4 q = make_float4(__fmul_rn(v[j].x, inv), __fmul_rn(v[j].y, inv),
                                     __fmul_rn(v[j].z, inv), __fmul_rn(v[j].w, inv));
        const uint32_t four = e4m3x4(q);
        *reinterpret_cast<uint32_t*>(codes + 4 * c) = four;
        if ((lane & (group - 1)) == 0) scales[(4 * c) / a.block] = static_cast<uint8_t>(byte);
        if (a.codes_interleaved != nullptr) {
          // Columns 4m .. 4m + 3 of a 32-block: the even two go to bytes 2m, 2m + 1, the odd two
          // to bytes 16 + 2m, 16 + 2m + 1.
          uint8_t* blk = a.codes_interleaved + row * a.dim + (4 * c) / 32 * 32;
          const int m = (c % 8);
          *reinterpret_cast<uint16_t*>(blk + 2 * m) =
              static_cast<uint16_t>(__byte_perm(four, 0, 0x0020));
          *reinterpret_cast<uint16_t*>(blk + 16 + 2 * m) =
              static_cast<uint16_t>(__byte_perm(four, 0, 0x0031));
        }
      }
    }
  }
}

}  // namespace di::ops_detail
