// Block-scaled FP8 / FP4 -> bf16 dequantization, bit-identical to the CPU references in
// common/block_dequant.cc, which define each element with the shared codec steps
// e4m3_scaled_to_bf16 / e2m1_scaled_to_bf16 (common/fp8.h, fp4.h).
//
// Memory-bound: each thread of the vector paths loads 16 (FP8) or 8 (FP4) bytes of weight with
// one non-coherent load and writes 32 bytes with two 16-byte stores; all its elements share one
// scale. The arithmetic is kept under the memory time:
//  - FP8: hardware e4m3x2 -> f16x2, f16 -> f32, one fp32 multiply, hardware RNE f32x2 -> bf16x2;
//    equal to the codec step for every non-NaN input. Words holding a NaN code, and NaN scales,
//    take the codec step (the hardware's NaN bit patterns differ).
//  - FP4: only 8 magnitudes exist, so each thread converts those 8 once with the codec step and
//    looks every nibble up with byte permutes.
// Rows whose length or alignment rules out 16-byte accesses take the scalar (codec) kernels.
//
// Exactness of products that are fp32 subnormals (scale bytes below ~10) assumes this file is
// compiled without -ftz=true / --use_fast_math.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/bf16.h"
#include "common/check.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/ops/device_common.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest
constexpr int kFp4Block = 32;

// ---- Codec paths: the shared scalar steps, for any input. ----

__device__ __forceinline__ uint32_t fp8_to_bf16(uint32_t code, float scale) {
  return e4m3_scaled_to_bf16(static_cast<uint8_t>(code), scale);
}

__device__ __forceinline__ uint32_t fp4_to_bf16(uint32_t nibble, float scale) {
  return e2m1_scaled_to_bf16(static_cast<uint8_t>(nibble), scale);
}

// The 4 e4m3 codes of `word` (lowest byte = lowest k) as 4 bf16 in two words (lowest k in the
// low half).
__device__ __forceinline__ void fp8x4_to_bf16x4_codec(uint32_t word, float scale, uint32_t& lo,
                                                      uint32_t& hi) {
  lo = fp8_to_bf16(word & 0xFFu, scale) | (fp8_to_bf16((word >> 8) & 0xFFu, scale) << 16);
  hi = fp8_to_bf16((word >> 16) & 0xFFu, scale) | (fp8_to_bf16(word >> 24, scale) << 16);
}

// ---- Hardware paths: the same results with far fewer instructions. ----

// True when a byte of `word` is an e4m3 NaN code (0x7F / 0xFF).
__device__ __forceinline__ bool has_e4m3_nan(uint32_t word) {
  const uint32_t t = (word & 0x7F7F7F7Fu) ^ 0x7F7F7F7Fu;  // a zero byte marks a NaN code
  return ((t - 0x01010101u) & ~t & 0x80808080u) != 0;
}

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);  // cvt.rn.bf16x2.f32: RNE, no FTZ
  return *reinterpret_cast<const uint32_t*>(&b);
}

// fp8x4_to_bf16x4_codec for a word without NaN codes and a non-NaN scale: e4m3 -> f16 -> f32 are
// exact, the product by a power of two is exact (or overflows to inf, as on the CPU), and the
// hardware rounds once to bf16 with RNE.
__device__ __forceinline__ void fp8x4_to_bf16x4_hw(uint32_t word, float scale, uint32_t& lo,
                                                   uint32_t& hi) {
  const float4 f = ops_detail::e4m3x4_to_float4(word);
  lo = bf16x2_bits(f.x * scale, f.y * scale);
  hi = bf16x2_bits(f.z * scale, f.w * scale);
}

__device__ __forceinline__ void fp8x4_to_bf16x4(uint32_t word, float scale, bool scale_is_nan,
                                                uint32_t& lo, uint32_t& hi) {
  if (scale_is_nan || has_e4m3_nan(word)) {
    fp8x4_to_bf16x4_codec(word, scale, lo, hi);  // the hardware's NaN bits differ
  } else {
    fp8x4_to_bf16x4_hw(word, scale, lo, hi);
  }
}

// The 8 e2m1 magnitudes times one scale, as bf16 split into byte tables for __byte_perm: lo0/lo1
// hold the low bytes of entries 0..3 / 4..7, hi0/hi1 the high bytes.
struct Fp4Table {
  uint32_t lo0, lo1, hi0, hi1;
};

__device__ __forceinline__ Fp4Table make_fp4_table_codec(float scale) {
  uint32_t lo[2] = {0, 0};
  uint32_t hi[2] = {0, 0};
#pragma unroll
  for (uint32_t m = 0; m < 8; ++m) {
    const uint32_t b = fp4_to_bf16(m, scale);
    lo[m / 4] |= (b & 0xFFu) << (8 * (m % 4));
    hi[m / 4] |= (b >> 8) << (8 * (m % 4));
  }
  return {lo[0], lo[1], hi[0], hi[1]};
}

// For scale bytes in [2, 252] every product m * 2^(s-127) is a normal finite bf16, so its bits are
// bf16(m) with (s - 127) added to the exponent field: integer adds on bf16x2 pairs instead of
// eight conversions. Other scale bytes (subnormal or overflowing products, NaN) use the codec.
__device__ __forceinline__ Fp4Table make_fp4_table(uint8_t scale_byte) {
  if (scale_byte < 2 || scale_byte > 252) return make_fp4_table_codec(e8m0_to_float(scale_byte));
  // d = (s - 127) << 7 may be negative. As integers, W + d * 0x10001 == (h0 + d) + (h1 + d) * 2^16
  // for a pair W = h0 + h1 * 2^16, and both new halves lie in [0, 2^16): the wrapped 32-bit sum
  // is exactly the packed pair.
  const uint32_t delta = static_cast<uint32_t>(scale_byte - 127) << 7;
  const uint32_t both = delta * 0x10001u;
  const uint32_t w01 = 0x3F000000u + (delta << 16);  // {0, 0.5}: zero stays zero
  const uint32_t w23 = 0x3FC03F80u + both;           // {1, 1.5}
  const uint32_t w45 = 0x40404000u + both;           // {2, 3}
  const uint32_t w67 = 0x40C04080u + both;           // {4, 6}
  return {__byte_perm(w01, w23, 0x6420), __byte_perm(w45, w67, 0x6420),
          __byte_perm(w01, w23, 0x7531), __byte_perm(w45, w67, 0x7531)};
}

// Four e2m1 nibbles (the low 16 bits of `nibbles`, element 0 lowest) as two bf16x2 words. Each
// nibble's magnitude (its low 3 bits) is a __byte_perm selector into the tables; a negative code
// gives the positive result with bf16's sign bit set, as in the codec (RNE is sign-symmetric, and
// a NaN scale gives 0x7FC0 | sign either way).
__device__ __forceinline__ void fp4x4_to_bf16x4(uint32_t nibbles, const Fp4Table& t, uint32_t& w01,
                                                uint32_t& w23) {
  const uint32_t sel = nibbles & 0x7777u;
  const uint32_t lo = __byte_perm(t.lo0, t.lo1, sel);  // low bytes of the 4 results
  const uint32_t hi = __byte_perm(t.hi0, t.hi1, sel);  // high bytes
  w01 = __byte_perm(lo, hi, 0x5140) | ((nibbles << 12) & 0x8000u) | ((nibbles << 24) & 0x80000000u);
  w23 = __byte_perm(lo, hi, 0x7362) | ((nibbles << 4) & 0x8000u) | ((nibbles << 16) & 0x80000000u);
}

// ---- Kernels ----

// Needs k % 16 == 0, bk % 16 == 0 and 16-byte aligned weight/out: each thread owns 16 consecutive
// elements of a row, all in one scale block.
template <typename Index>
__global__ void __launch_bounds__(kThreads)
    dequant_fp8_vec16_kernel(DequantFp8Params p, Index groups_per_row, Index scale_cols,
                             Index total_groups) {
  const Index stride = static_cast<Index>(gridDim.x) * kThreads;
  for (Index g = static_cast<Index>(blockIdx.x) * kThreads + threadIdx.x; g < total_groups;
       g += stride) {
    const Index row = g / groups_per_row;
    const Index col = (g - row * groups_per_row) * 16;
    const int64_t offset = static_cast<int64_t>(row) * p.k + col;
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(p.weight + offset));
    const uint8_t scale_byte = __ldg(p.scale + (row / static_cast<Index>(p.bn)) * scale_cols +
                                     col / static_cast<Index>(p.bk));
    const float scale = e8m0_to_float(scale_byte);
    const bool scale_is_nan = e8m0_is_nan(scale_byte);
    uint4 out0;
    uint4 out1;
    fp8x4_to_bf16x4(w.x, scale, scale_is_nan, out0.x, out0.y);
    fp8x4_to_bf16x4(w.y, scale, scale_is_nan, out0.z, out0.w);
    fp8x4_to_bf16x4(w.z, scale, scale_is_nan, out1.x, out1.y);
    fp8x4_to_bf16x4(w.w, scale, scale_is_nan, out1.z, out1.w);
    uint4* out = reinterpret_cast<uint4*>(p.out_bf16 + offset);
    out[0] = out0;
    out[1] = out1;
  }
}

// Any shape and alignment: one element per thread and iteration.
template <typename Index>
__global__ void __launch_bounds__(kThreads)
    dequant_fp8_scalar_kernel(DequantFp8Params p, Index k, Index scale_cols, Index total) {
  const Index stride = static_cast<Index>(gridDim.x) * kThreads;
  for (Index i = static_cast<Index>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += stride) {
    const Index row = i / k;
    const Index col = i - row * k;
    const float scale = e8m0_to_float(__ldg(
        p.scale + (row / static_cast<Index>(p.bn)) * scale_cols + col / static_cast<Index>(p.bk)));
    p.out_bf16[i] = static_cast<uint16_t>(fp8_to_bf16(__ldg(p.weight + i), scale));
  }
}

// Needs k % 16 == 0, 8-byte aligned weight and 16-byte aligned out: each thread owns 16
// consecutive elements of a row (8 bytes of weight, 32 bytes of output), all in one 32-element
// scale block.
template <typename Index>
__global__ void __launch_bounds__(kThreads)
    dequant_fp4_vec16_kernel(DequantFp4Params p, Index chunks_per_row, Index scale_cols,
                             Index total_chunks) {
  const Index stride = static_cast<Index>(gridDim.x) * kThreads;
  for (Index g = static_cast<Index>(blockIdx.x) * kThreads + threadIdx.x; g < total_chunks;
       g += stride) {
    const Index row = g / chunks_per_row;
    const Index chunk = g - row * chunks_per_row;
    const Fp4Table table = make_fp4_table(__ldg(p.scale + row * scale_cols + chunk / 2));
    // Rows are whole chunks, so g indexes the 8-byte weight chunk and the 32-byte output chunk.
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(p.weight) + g);
    uint4 out0;
    uint4 out1;
    fp4x4_to_bf16x4(w.x & 0xFFFFu, table, out0.x, out0.y);
    fp4x4_to_bf16x4(w.x >> 16, table, out0.z, out0.w);
    fp4x4_to_bf16x4(w.y & 0xFFFFu, table, out1.x, out1.y);
    fp4x4_to_bf16x4(w.y >> 16, table, out1.z, out1.w);
    uint4* out = reinterpret_cast<uint4*>(p.out_bf16) + 2 * static_cast<int64_t>(g);
    out[0] = out0;
    out[1] = out1;
  }
}

// Any even k and any alignment: one weight byte (two elements) per thread and iteration.
template <typename Index>
__global__ void __launch_bounds__(kThreads)
    dequant_fp4_scalar_kernel(DequantFp4Params p, Index row_bytes, Index scale_cols, Index total) {
  const Index stride = static_cast<Index>(gridDim.x) * kThreads;
  for (Index i = static_cast<Index>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += stride) {
    const Index row = i / row_bytes;
    const Index col = (i - row * row_bytes) * 2;  // the even element
    const float scale = e8m0_to_float(__ldg(p.scale + row * scale_cols + col / kFp4Block));
    const uint32_t byte = __ldg(p.weight + i);
    uint16_t* out = p.out_bf16 + static_cast<int64_t>(row) * p.k + col;
    out[0] = static_cast<uint16_t>(fp4_to_bf16(byte & 0xFu, scale));
    out[1] = static_cast<uint16_t>(fp4_to_bf16(byte >> 4, scale));
  }
}

// ---- Host side ----

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

unsigned grid_for(int64_t work_items) {
  return static_cast<unsigned>(std::min(ceil_div(work_items, kThreads), kMaxBlocks));
}

// 32-bit index math (much cheaper division) when every index plus one grid stride fits.
bool fits_u32(int64_t work_items) {
  return work_items + kMaxBlocks * kThreads <= static_cast<int64_t>(UINT32_MAX);
}

}  // namespace

void dequant_fp8_to_bf16(const DequantFp8Params& p, cudaStream_t stream) {
  DI_CHECK(p.n >= 0 && p.k >= 0, "dequant_fp8_to_bf16: bad shape [{}, {}]", p.n, p.k);
  DI_CHECK(p.bn > 0 && p.bk > 0, "dequant_fp8_to_bf16: block size must be positive, got {}x{}",
           p.bn, p.bk);
  if (p.n == 0 || p.k == 0) return;
  DI_CHECK(p.weight != nullptr && p.scale != nullptr && p.out_bf16 != nullptr,
           "dequant_fp8_to_bf16: null weight/scale/out pointer");
  const int64_t scale_cols = ceil_div(p.k, p.bk);
  const bool vec =
      p.k % 16 == 0 && p.bk % 16 == 0 && aligned(p.weight, 16) && aligned(p.out_bf16, 16);
  if (vec) {
    const int64_t groups_per_row = p.k / 16;
    const int64_t total = p.n * groups_per_row;
    if (fits_u32(total)) {
      dequant_fp8_vec16_kernel<uint32_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint32_t>(groups_per_row), static_cast<uint32_t>(scale_cols),
          static_cast<uint32_t>(total));
    } else {
      dequant_fp8_vec16_kernel<uint64_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint64_t>(groups_per_row), static_cast<uint64_t>(scale_cols),
          static_cast<uint64_t>(total));
    }
  } else {
    const int64_t total = p.n * p.k;
    if (fits_u32(total)) {
      dequant_fp8_scalar_kernel<uint32_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint32_t>(p.k), static_cast<uint32_t>(scale_cols),
          static_cast<uint32_t>(total));
    } else {
      dequant_fp8_scalar_kernel<uint64_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint64_t>(p.k), static_cast<uint64_t>(scale_cols),
          static_cast<uint64_t>(total));
    }
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

void dequant_fp4_to_bf16(const DequantFp4Params& p, cudaStream_t stream) {
  DI_CHECK(p.n >= 0 && p.k >= 0, "dequant_fp4_to_bf16: bad shape [{}, {}]", p.n, p.k);
  DI_CHECK(p.k % 2 == 0, "dequant_fp4_to_bf16: k must be even (two e2m1 per byte), got {}", p.k);
  if (p.n == 0 || p.k == 0) return;
  DI_CHECK(p.weight != nullptr && p.scale != nullptr && p.out_bf16 != nullptr,
           "dequant_fp4_to_bf16: null weight/scale/out pointer");
  const int64_t scale_cols = ceil_div(p.k, kFp4Block);
  const bool vec = p.k % 16 == 0 && aligned(p.weight, 8) && aligned(p.out_bf16, 16);
  if (vec) {
    const int64_t chunks_per_row = p.k / 16;
    const int64_t total = p.n * chunks_per_row;
    if (fits_u32(total)) {
      dequant_fp4_vec16_kernel<uint32_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint32_t>(chunks_per_row), static_cast<uint32_t>(scale_cols),
          static_cast<uint32_t>(total));
    } else {
      dequant_fp4_vec16_kernel<uint64_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint64_t>(chunks_per_row), static_cast<uint64_t>(scale_cols),
          static_cast<uint64_t>(total));
    }
  } else {
    const int64_t row_bytes = p.k / 2;
    const int64_t total = p.n * row_bytes;
    if (fits_u32(total)) {
      dequant_fp4_scalar_kernel<uint32_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint32_t>(row_bytes), static_cast<uint32_t>(scale_cols),
          static_cast<uint32_t>(total));
    } else {
      dequant_fp4_scalar_kernel<uint64_t><<<grid_for(total), kThreads, 0, stream>>>(
          p, static_cast<uint64_t>(row_bytes), static_cast<uint64_t>(scale_cols),
          static_cast<uint64_t>(total));
    }
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
