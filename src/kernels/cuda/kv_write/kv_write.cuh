#pragma once

// CUDA launchers of the V4.1 cache writers (kernels/params/kv_write.h): window KV write, ratio-1
// and ratio-2 compressors, index-key projection. Host declarations are safe to include from .cc
// files; launchers validate their Params (di::Error), never allocate and never synchronize.
//
// The device helpers at the end (compiled only by nvcc) are shared by the three .cu files: a
// 512-wide row lives in shared memory, 128 threads own 4 consecutive values each. The generic-width
// helpers (*_generic, kernels/params/kv_write.h "Widths") work on a row of any supported width in
// dynamic shared memory with block-strided loops: one thread per scale block quantizes it with the
// same arithmetic as the 512-wide helpers.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/params/kv_write.h"

namespace di {

// Host-side plan of one compressor launch (house rule: work splits are computed on the host).
// Inputs: per row its table batch row (seq) and absolute position; per table batch row the row of
// the ratio-2 state pool (state_rows, ignored for ratio 1). The rows of each sequence must cover
// consecutive positions, each once (any row order).
// Outputs, in latent-row order (the order the compressor writes latents and the index-key
// kernel's `seq` / `group` arrays):
//   ratio 1: latent row r = input row r; group_seq = seq, group_index = positions; work empty.
//   ratio 2: sequences in ascending batch row, groups ascending; `work` = the CTAs of
//            compress_ratio2 (Ratio2Work documents the pairing and the race-free tail writes).
struct CompressorPlan {
  std::vector<Ratio2Work> work;
  std::vector<int32_t> group_seq;    // [groups]
  std::vector<int64_t> group_index;  // [groups]
  int64_t groups() const { return static_cast<int64_t>(group_index.size()); }
};
CompressorPlan plan_compressor(int ratio, std::span<const int32_t> seq,
                               std::span<const int64_t> positions,
                               std::span<const int32_t> state_rows);

// Each launcher runs the tuned kernel at the production widths (dim 512 / index 128, RoPE 64) and
// a generic kernel (one CTA per row, group or work item) at any other supported width.
// One CTA per row.
void swa_write(const SwaWriteParams& params, cudaStream_t stream);
// One CTA per row.
void compress_ratio1(const CompressRatio1Params& params, cudaStream_t stream);
// One CTA per work item.
void compress_ratio2(const CompressRatio2Params& params, cudaStream_t stream);
// One CTA per kIndexKeyGroupsPerCta groups (wk rows read once per CTA, reused across its groups).
inline constexpr int kIndexKeyGroupsPerCta = 8;
void index_key_write(const IndexKeyParams& params, cudaStream_t stream);

// Launcher checks shared by the three .cu files (throw di::Error naming `op`).
namespace kv_write_detail {
// Input rows of width `dim` with `stride` elements between them.
void check_act(const char* op, const void* x, int64_t rows, int64_t stride, int32_t dim,
               ActPrecision p);
// A supported width: dim a positive multiple of 32, at most kKvGenericMaxFloats, rope_dim even
// and in [2, dim]. Returns whether it is the production width (`production_dim`, kKvRopeDim).
bool check_width(const char* op, int32_t dim, int32_t rope_dim, int32_t production_dim);
}  // namespace kv_write_detail

}  // namespace di

#if defined(__CUDACC__)

#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cuda/ops/device_common.cuh"

namespace di::kv_write_detail {

inline constexpr int kThreads = 128;  // 4 values of the 512-wide row per thread
static_assert(kThreads * 4 == kKvDim);

// Four consecutive values of an activation row as fp32 (bf16 widened exactly).
template <typename T>
__device__ __forceinline__ float4 load_row4(const T* row, int tid) {
  return ops_detail::load4(row + 4 * tid);
}

// 1 / sqrt(mean(x^2) + eps) of `dim` values in shared memory, by the calling thread alone: the
// squares are added one by one in ascending order, unfused, which is cpu::rms_rsqrt<float>'s
// order exactly (bitwise equal norms; ~1 us of latency per row, negligible next to a layer).
__device__ __forceinline__ float rms_scale_sequential(const float* x, int dim, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < dim; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    ss = __fadd_rn(ss, __fmul_rn(v.x, v.x));
    ss = __fadd_rn(ss, __fmul_rn(v.y, v.y));
    ss = __fadd_rn(ss, __fmul_rn(v.z, v.z));
    ss = __fadd_rn(ss, __fmul_rn(v.w, v.w));
  }
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(dim)), eps)));
}

// In place: row[i] = w[i] * (row[i] * s) for the 512-wide shared row, s computed by thread 0.
// Enters and leaves with the row complete in shared memory (synchronizes the CTA).
__device__ __forceinline__ void rms_norm_row512(float* row, const float* weight, float eps,
                                                float* scale_slot) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) *scale_slot = rms_scale_sequential(row, kKvDim, eps);
  __syncthreads();
  const float s = *scale_slot;
  const float4 v = *reinterpret_cast<const float4*>(row + 4 * tid);
  const float4 w = *reinterpret_cast<const float4*>(weight + 4 * tid);
  *reinterpret_cast<float4*>(row + 4 * tid) =
      make_float4(__fmul_rn(w.x, __fmul_rn(v.x, s)), __fmul_rn(w.y, __fmul_rn(v.y, s)),
                  __fmul_rn(w.z, __fmul_rn(v.z, s)), __fmul_rn(w.w, __fmul_rn(v.w, s)));
  __syncthreads();
}

// Rotates pair i = `pair` of the RoPE tail `tail` (values 2i, 2i + 1) at position `pos`, as
// cpu::RopeTable<float>::apply: angle = fp32(pos) * freq (one fp32 product), cos/sin evaluated in
// double and rounded once to fp32 (kernels/cuda/ops/rope.cu), unfused products and sums.
__device__ __forceinline__ void rope_pair(float* tail, int pair, int64_t pos, const float* freqs) {
  const float2 cs = ops_detail::rope_cos_sin(pos, freqs[pair]);
  const float2 r = ops_detail::rope_rotate(tail[2 * pair], tail[2 * pair + 1], cs.x, cs.y);
  tail[2 * pair] = r.x;
  tail[2 * pair + 1] = r.y;
}

// RoPE on the last 64 values of the 512-wide shared row (threads 0..31), then a CTA barrier.
__device__ __forceinline__ void rope_row512(float* row, int64_t pos, const float* freqs) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < kKvRopeDim / 2) rope_pair(row + (kKvDim - kKvRopeDim), tid, pos, freqs);
  __syncthreads();
}

// The 528-byte SWA entry of the shared row (cpu::pack_swa_entry): thread t quantizes values
// 4t..4t+3; a 32-value scale block is 8 consecutive lanes, its amax an xor-shuffle max.
// act_scale_byte / e4m3x4 are the dense ops' act_quant steps (bitwise cpu::act_quant_e4m3).
__device__ __forceinline__ void store_swa_entry(const float* row, uint8_t* entry) {
  const int tid = static_cast<int>(threadIdx.x);
  const float4 v = *reinterpret_cast<const float4*>(row + 4 * tid);
  float amax = ops_detail::abs_max4(v);
#pragma unroll
  for (int off = kSwaScaleBlock / 8; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const uint32_t byte = ops_detail::act_scale_byte(amax);
  const float inv = ops_detail::inv_scale_from_byte(byte);  // exact: the scale is a power of two
  const float4 q = make_float4(__fmul_rn(v.x, inv), __fmul_rn(v.y, inv), __fmul_rn(v.z, inv),
                               __fmul_rn(v.w, inv));
  *reinterpret_cast<uint32_t*>(entry + 4 * tid) = ops_detail::e4m3x4(q);
  if (tid % (kSwaScaleBlock / 4) == 0) {
    entry[kKvDim + (4 * tid) / kSwaScaleBlock] = static_cast<uint8_t>(byte);
  }
}

// e2m1 code of v / s, clamped to +-6 (cpu::fp4_quant_*: x / s is one correctly rounded division).
__device__ __forceinline__ uint8_t e2m1_scaled(float v, float s) {
  return e2m1_from_float(fminf(fmaxf(__fdiv_rn(v, s), -6.0f), 6.0f));
}

// The 288-byte compressed entry of the shared row (cpu::pack_comp_entry): a 16-value block is 4
// consecutive lanes; scale = e4m3_rne(max(amax, 6 * 2^-9) / 6), a plain e4m3 value (not a power of
// two), so elements are divided by it, never multiplied by a reciprocal.
__device__ __forceinline__ void store_comp_entry(const float* row, uint8_t* entry) {
  const int tid = static_cast<int>(threadIdx.x);
  const float4 v = *reinterpret_cast<const float4*>(row + 4 * tid);
  float amax = ops_detail::abs_max4(v);
#pragma unroll
  for (int off = kCompScaleBlock / 8; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float a = fmaxf(amax, 6.0f * 0x1p-9f);
  const uint8_t code = e4m3_from_float(__fdiv_rn(a, 6.0f));
  const float s = e4m3_to_float(code);
  const uint32_t lo = pack_e2m1(e2m1_scaled(v.x, s), e2m1_scaled(v.y, s));
  const uint32_t hi = pack_e2m1(e2m1_scaled(v.z, s), e2m1_scaled(v.w, s));
  *reinterpret_cast<uint16_t*>(entry + 2 * tid) = static_cast<uint16_t>(lo | (hi << 8));
  if (tid % (kCompScaleBlock / 4) == 0) entry[kKvDim / 2 + (4 * tid) / kCompScaleBlock] = code;
}

// ---------------------------------------------------------------------------------------------
// Generic widths: a row of `dim` floats in (16-byte aligned) shared memory, any CTA size.

// row[i] = x[i] as fp32 (bf16 widened exactly), i < dim, then a CTA barrier.
template <typename T>
__device__ __forceinline__ void load_row_generic(const T* x, float* row, int dim) {
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x))
    row[i] = ops_detail::to_float(x[i]);
  __syncthreads();
}

// rms_norm_row512 at width dim (a multiple of 4): the same sequential scale by one thread.
__device__ __forceinline__ void rms_norm_row_generic(float* row, const float* weight, int dim,
                                                     float eps, float* scale_slot) {
  if (threadIdx.x == 0) *scale_slot = rms_scale_sequential(row, dim, eps);
  __syncthreads();
  const float s = *scale_slot;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x))
    row[i] = __fmul_rn(weight[i], __fmul_rn(row[i], s));
  __syncthreads();
}

// RoPE on the last rope_dim values of the row at position pos, then a CTA barrier.
__device__ __forceinline__ void rope_row_generic(float* row, int dim, int rope_dim, int64_t pos,
                                                 const float* freqs) {
  for (int i = static_cast<int>(threadIdx.x); i < rope_dim / 2; i += static_cast<int>(blockDim.x))
    rope_pair(row + (dim - rope_dim), i, pos, freqs);
  __syncthreads();
}

// |x| maximum of n values (a multiple of 4) starting at a 16-byte aligned shared address.
__device__ __forceinline__ float abs_max_generic(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; i += 4)
    amax = fmaxf(amax, ops_detail::abs_max4(*reinterpret_cast<const float4*>(x + i)));
  return amax;
}

// The swa_entry_bytes(dim) entry of the row (cpu::pack_swa_entry): thread b quantizes scale block
// b as store_swa_entry does (act_scale_byte, exact reciprocal, e4m3x4). Byte stores: entries of
// generic widths need not be 4-byte aligned.
__device__ __forceinline__ void store_swa_entry_generic(const float* row, int dim, uint8_t* entry) {
  for (int b = static_cast<int>(threadIdx.x); b < dim / kSwaScaleBlock;
       b += static_cast<int>(blockDim.x)) {
    const float* x = row + b * kSwaScaleBlock;
    const uint32_t byte = ops_detail::act_scale_byte(abs_max_generic(x, kSwaScaleBlock));
    const float inv = ops_detail::inv_scale_from_byte(byte);
    for (int i = 0; i < kSwaScaleBlock; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(x + i);
      const uint32_t codes = ops_detail::e4m3x4(make_float4(
          __fmul_rn(v.x, inv), __fmul_rn(v.y, inv), __fmul_rn(v.z, inv), __fmul_rn(v.w, inv)));
      for (int j = 0; j < 4; ++j)
        entry[b * kSwaScaleBlock + i + j] = static_cast<uint8_t>(codes >> (8 * j));
    }
    entry[dim + b] = static_cast<uint8_t>(byte);
  }
}

// The comp_entry_bytes(dim) entry of the row (cpu::pack_comp_entry), one thread per 16-value
// block, store_comp_entry's arithmetic.
__device__ __forceinline__ void store_comp_entry_generic(const float* row, int dim,
                                                         uint8_t* entry) {
  for (int b = static_cast<int>(threadIdx.x); b < dim / kCompScaleBlock;
       b += static_cast<int>(blockDim.x)) {
    const float* x = row + b * kCompScaleBlock;
    const float a = fmaxf(abs_max_generic(x, kCompScaleBlock), 6.0f * 0x1p-9f);
    const uint8_t code = e4m3_from_float(__fdiv_rn(a, 6.0f));
    const float s = e4m3_to_float(code);
    for (int i = 0; i < kCompScaleBlock; i += 2) {
      entry[(b * kCompScaleBlock + i) / 2] =
          pack_e2m1(e2m1_scaled(x[i], s), e2m1_scaled(x[i + 1], s));
    }
    entry[dim / 2 + b] = code;
  }
}

// UE8M0 byte of the FP4 index-key scale of a 32-value block (cpu::pack_index_key): a = max(amax,
// 6 * 2^-126), byte = 2^ceil(log2(fp32(a * fp32(1/6)))) read off the bits of the (normal) product.
__device__ __forceinline__ uint32_t fp4_ue8m0_scale_byte(float amax) {
  const float t = __fmul_rn(fmaxf(amax, 6.0f * 0x1p-126f), 1.0f / 6.0f);
  const uint32_t u = __float_as_uint(t);
  return (u >> 23) + ((u & 0x7FFFFFu) != 0 ? 1u : 0u);
}

// The index_key_bytes(dim) entry of the row (cpu::pack_index_key), one thread per 32-value block.
__device__ __forceinline__ void store_index_key_generic(const float* row, int dim, uint8_t* entry) {
  for (int b = static_cast<int>(threadIdx.x); b < dim / kIndexScaleBlock;
       b += static_cast<int>(blockDim.x)) {
    const float* x = row + b * kIndexScaleBlock;
    const uint32_t byte = fp4_ue8m0_scale_byte(abs_max_generic(x, kIndexScaleBlock));
    const float s = __uint_as_float(byte << 23);  // byte in [1, 254]: a normal power of two
    for (int i = 0; i < kIndexScaleBlock; i += 2) {
      entry[(b * kIndexScaleBlock + i) / 2] =
          pack_e2m1(e2m1_scaled(x[i], s), e2m1_scaled(x[i + 1], s));
    }
    entry[dim / 2 + b] = static_cast<uint8_t>(byte);
  }
}

}  // namespace di::kv_write_detail

#endif  // __CUDACC__
