#pragma once

// CUDA launchers of the V4.1 cache writers (kernels/params/kv_write.h): window KV write, ratio-1
// and ratio-2 compressors, index-key projection. Host declarations are safe to include from .cc
// files; launchers validate their Params (di::Error), never allocate and never synchronize.
//
// The device helpers at the end (compiled only by nvcc) are shared by the three .cu files: a
// 512-wide row lives in shared memory, 128 threads own 4 consecutive values each.

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
void check_act(const char* op, const void* x, int64_t rows, int64_t stride, ActPrecision p);
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
  const float angle = __fmul_rn(static_cast<float>(pos), freqs[pair]);
  double sd = 0;
  double cd = 0;
  sincos(static_cast<double>(angle), &sd, &cd);
  const float c = static_cast<float>(cd);
  const float s = static_cast<float>(sd);
  const float a = tail[2 * pair];
  const float b = tail[2 * pair + 1];
  tail[2 * pair] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  tail[2 * pair + 1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
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

}  // namespace di::kv_write_detail

#endif  // __CUDACC__
