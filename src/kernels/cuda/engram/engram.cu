// Engram on the GPU (kernels/params/engram.h): decode of the staged FP8 table rows, and the gate
// and mix of the hc streams.
//
// engram_decode_rows: memory-bound and element-wise. Each thread of a grid-stride loop owns 16
//   consecutive codes (one 16-byte load) that share one UE8M0 byte: because every table row holds
//   a multiple of 32 values, element e of the staging block has scale byte e / 32 whatever its row,
//   so no division by the row length is needed. e4m3 -> f16 -> f32 in hardware (exact), one fp32
//   multiply by the power of two (exact, or the same single rounding as cpu::decode_rows<float>
//   when the product is an fp32 subnormal), then fp32 stores or one RNE rounding to bf16. For
//   bf16, words holding a NaN code, and NaN scales, take the shared codec step (common/fp8.h),
//   whose NaN bits are the CPU's. Exactness of fp32-subnormal products assumes no -ftz /
//   --use_fast_math.
// engram_gate_mix: one CTA of 256 threads per (row, stream). Pass 1: each thread accumulates the
//   three sums (h^2, key^2, h * wqk * key) over its float4 chunks d = 4 * (tid + 256 j) in
//   ascending j; a warp butterfly, then every thread adds the 8 warp partials in warp order. The
//   order depends on dim only, so results are batch-invariant bit for bit. Every thread then
//   computes the same gate; pass 2 re-reads its own h chunks (L1/L2 hits) and writes h + gate * v.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "common/fp8.h"
#include "kernels/cuda/engram/engram.cuh"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

using ops_detail::load4;
using ops_detail::store4;

constexpr int kDecodeThreads = 256;
constexpr int64_t kDecodeMaxBlocks = int64_t{1} << 16;  // grid-stride loops cover the rest
constexpr int kMixThreads = 256;
constexpr int kMixWarps = kMixThreads / 32;

// ---- engram_decode_rows ----

// True when a byte of `word` is an e4m3 NaN code (0x7F / 0xFF).
__device__ __forceinline__ bool has_e4m3_nan(uint32_t word) {
  const uint32_t t = (word & 0x7F7F7F7Fu) ^ 0x7F7F7F7Fu;  // a zero byte marks a NaN code
  return ((t - 0x01010101u) & ~t & 0x80808080u) != 0;
}

// The 4 values of `word` (lowest byte first) times `scale`.
__device__ __forceinline__ float4 e4m3x4_scaled(uint32_t word, float scale) {
  const float4 f = ops_detail::e4m3x4_to_float4(word);
  return make_float4(__fmul_rn(f.x, scale), __fmul_rn(f.y, scale), __fmul_rn(f.z, scale),
                     __fmul_rn(f.w, scale));
}

// fp32: the hardware path for every word (a NaN code or scale gives a NaN, as on the CPU; only
// the NaN bits may differ).
__device__ __forceinline__ void store_decoded(float* out, uint32_t word, float scale, bool) {
  store4(out, e4m3x4_scaled(word, scale));
}

// bf16: words with a NaN code, and NaN scales, take the shared codec step (its NaN bits are the
// CPU's; the hardware's differ).
__device__ __forceinline__ void store_decoded(uint16_t* out, uint32_t word, float scale,
                                              bool slow) {
  if (!slow) {
    store4(out, e4m3x4_scaled(word, scale));  // one RNE rounding of the exact fp32 product
    return;
  }
  const uint32_t lo =
      e4m3_scaled_to_bf16(static_cast<uint8_t>(word), scale) |
      (static_cast<uint32_t>(e4m3_scaled_to_bf16(static_cast<uint8_t>(word >> 8), scale)) << 16);
  const uint32_t hi =
      e4m3_scaled_to_bf16(static_cast<uint8_t>(word >> 16), scale) |
      (static_cast<uint32_t>(e4m3_scaled_to_bf16(static_cast<uint8_t>(word >> 24), scale)) << 16);
  *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
}

template <typename T>
__global__ void __launch_bounds__(kDecodeThreads)
    engram_decode_kernel(const uint8_t* codes, const uint8_t* scales, T* out, int64_t chunks) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kDecodeThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kDecodeThreads + threadIdx.x; i < chunks;
       i += stride) {
    // Plain (coherent) loads: the staging may be pinned host memory read through UVA.
    const uint4 w = reinterpret_cast<const uint4*>(codes)[i];
    const uint8_t byte = scales[i / 2];  // 16 values per chunk, 32 per scale byte
    const float scale = e8m0_to_float(byte);
    const bool nan_scale = e8m0_is_nan(byte);
    T* o = out + 16 * i;
    store_decoded(o, w.x, scale, nan_scale || has_e4m3_nan(w.x));
    store_decoded(o + 4, w.y, scale, nan_scale || has_e4m3_nan(w.y));
    store_decoded(o + 8, w.z, scale, nan_scale || has_e4m3_nan(w.z));
    store_decoded(o + 12, w.w, scale, nan_scale || has_e4m3_nan(w.w));
  }
}

// ---- engram_gate_mix ----

// The block-wide sums of three per-thread partials, in one fixed order: a warp butterfly (every
// lane ends with the same bits, addition being commutative), then warps 0..7 left to right.
// Every thread returns the totals.
__device__ __forceinline__ float3 block_sum3(float3 v, float3* s_warp) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    v.x += __shfl_xor_sync(0xFFFFFFFFu, v.x, off);
    v.y += __shfl_xor_sync(0xFFFFFFFFu, v.y, off);
    v.z += __shfl_xor_sync(0xFFFFFFFFu, v.z, off);
  }
  if (threadIdx.x % 32 == 0) s_warp[threadIdx.x / 32] = v;
  __syncthreads();
  float3 t = s_warp[0];
#pragma unroll
  for (int w = 1; w < kMixWarps; ++w) {
    t.x += s_warp[w].x;
    t.y += s_warp[w].y;
    t.z += s_warp[w].z;
  }
  return t;
}

template <typename T>
__global__ void __launch_bounds__(kMixThreads) engram_gate_mix_kernel(const EngramGateMixParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ float3 s_warp[kMixWarps];
  const int64_t row = blockIdx.x / p.hc;
  const int64_t c = blockIdx.x - row * p.hc;
  const int64_t dim = p.dim;
  T* h = static_cast<T*>(p.h) + (row * p.hc + c) * dim;
  const T* kv = static_cast<const T*>(p.kv) + row * (p.hc + 1) * dim;
  const T* key = kv + c * dim;
  const T* value = kv + p.hc * dim;
  const float* wqk = p.wqk + c * dim;

  float3 acc = make_float3(0.0f, 0.0f, 0.0f);  // (sum h^2, sum key^2, sum h * wqk * key)
  for (int64_t d = 4 * static_cast<int64_t>(threadIdx.x); d < dim; d += 4 * kMixThreads) {
    const float4 x = load4(h + d);
    const float4 k = load4(key + d);
    const float4 q = load4(wqk + d);
    acc.x += x.x * x.x;
    acc.x += x.y * x.y;
    acc.x += x.z * x.z;
    acc.x += x.w * x.w;
    acc.y += k.x * k.x;
    acc.y += k.y * k.y;
    acc.y += k.z * k.z;
    acc.y += k.w * k.w;
    acc.z += x.x * q.x * k.x;
    acc.z += x.y * q.y * k.y;
    acc.z += x.z * q.z * k.z;
    acc.z += x.w * q.w * k.w;
  }
  const float3 sum = block_sum3(acc, s_warp);

  // The scalar steps of cpu::engram_gate_mix, IEEE division and square root.
  const auto fdim = static_cast<float>(dim);
  const float inv_sqrt_d = 1.0f / sqrtf(fdim);
  const float rstd = (1.0f / sqrtf(sum.x / fdim + p.eps)) * (1.0f / sqrtf(sum.y / fdim + p.eps));
  const float s = sum.z * rstd * inv_sqrt_d;
  const float a = fabsf(s);
  const float mag = sqrtf(a < 1e-6f ? 1e-6f : a);  // std::max(a, 1e-6f): a NaN stays NaN
  const bool image = p.image_mask != nullptr && p.image_mask[row] != 0;
  const float gate = image ? 0.0f : 1.0f / (1.0f + expf(-copysignf(mag, s)));
  if (threadIdx.x == 0 && p.gates != nullptr) p.gates[row * p.hc + c] = gate;

  for (int64_t d = 4 * static_cast<int64_t>(threadIdx.x); d < dim; d += 4 * kMixThreads) {
    float4 x = load4(h + d);
    const float4 v = load4(value + d);
    x.x = x.x + gate * v.x;
    x.y = x.y + gate * v.y;
    x.z = x.z + gate * v.z;
    x.w = x.w + gate * v.w;
    store4(h + d, x);
  }
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

}  // namespace

void engram_decode_rows(const EngramDecodeParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.cols > 0 && p.cols % 32 == 0,
           "engram_decode_rows: bad shape [rows {}, cols {}] (cols a positive multiple of 32)",
           p.rows, p.cols);
  DI_CHECK(p.precision == ActPrecision::kF32 || p.precision == ActPrecision::kBF16,
           "engram_decode_rows: unknown precision {}", static_cast<int>(p.precision));
  if (p.rows == 0) return;
  DI_CHECK(p.staging != nullptr && p.out != nullptr,
           "engram_decode_rows: null staging/out ({} rows x {})", p.rows, p.cols);
  DI_CHECK(aligned16(p.staging) && aligned16(p.out),
           "engram_decode_rows: staging and out must be 16-byte aligned ({} rows x {})", p.rows,
           p.cols);
  DI_CHECK(p.rows <= INT64_MAX / 2 / p.cols, "engram_decode_rows: {} rows x {} overflow", p.rows,
           p.cols);
  const int64_t values = p.rows * p.cols;
  const int64_t chunks = values / 16;
  const auto grid = static_cast<unsigned>(
      std::min<int64_t>((chunks + kDecodeThreads - 1) / kDecodeThreads, kDecodeMaxBlocks));
  const uint8_t* scales = p.staging + values;
  if (p.precision == ActPrecision::kF32) {
    cuda_detail::launch_pdl(engram_decode_kernel<float>, grid, kDecodeThreads, 0, stream, p.staging,
                            scales, static_cast<float*>(p.out), chunks);
  } else {
    cuda_detail::launch_pdl(engram_decode_kernel<uint16_t>, grid, kDecodeThreads, 0, stream,
                            p.staging, scales, static_cast<uint16_t*>(p.out), chunks);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

void engram_gate_mix(const EngramGateMixParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.hc >= 1 && p.dim > 0 && p.dim % 4 == 0,
           "engram_gate_mix: bad shape [rows {}, hc {}, dim {}] (dim a positive multiple of 4)",
           p.rows, p.hc, p.dim);
  DI_CHECK(p.precision == ActPrecision::kF32 || p.precision == ActPrecision::kBF16,
           "engram_gate_mix: unknown precision {}", static_cast<int>(p.precision));
  DI_CHECK(p.eps >= 0.0f, "engram_gate_mix: eps must be >= 0, got {}", p.eps);
  if (p.rows == 0) return;
  DI_CHECK(p.rows <= INT32_MAX / p.hc, "engram_gate_mix: {} rows x {} streams exceed the grid",
           p.rows, p.hc);
  DI_CHECK(p.h != nullptr && p.kv != nullptr && p.wqk != nullptr,
           "engram_gate_mix: null h/kv/wqk ([rows {}, hc {}, dim {}])", p.rows, p.hc, p.dim);
  DI_CHECK(aligned16(p.h) && aligned16(p.kv) && aligned16(p.wqk),
           "engram_gate_mix: h, kv and wqk must be 16-byte aligned ([rows {}, hc {}, dim {}])",
           p.rows, p.hc, p.dim);
  const auto grid = static_cast<unsigned>(p.rows * p.hc);
  if (p.precision == ActPrecision::kF32) {
    cuda_detail::launch_pdl(engram_gate_mix_kernel<float>, grid, kMixThreads, 0, stream, p);
  } else {
    cuda_detail::launch_pdl(engram_gate_mix_kernel<uint16_t>, grid, kMixThreads, 0, stream, p);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
