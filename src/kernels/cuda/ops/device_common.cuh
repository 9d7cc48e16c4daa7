#pragma once

// Device helpers shared by the dense small ops (kernels/cuda/ops/*.cu): activation loads/stores
// in fp32 or bf16 storage, and the UE8M0 / e4m3 steps of act_quant. Device code only: include
// from .cu files.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace di::ops_detail {

// Four consecutive activations as fp32, from fp32 (16-byte load) or bf16 (8-byte load) storage.
__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 load4(const uint16_t* p) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xFFFF0000u),
                     __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xFFFF0000u));
}

// bf16 bits of two floats, RNE (cvt.rn.bf16x2.f32; equal to bf16_from_float for non-NaN input).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&b);
}

__device__ __forceinline__ void store4(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}
__device__ __forceinline__ void store4(uint16_t* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
}

// v with every element rounded to bf16 (RNE) and widened back: the value bf16 storage holds.
__device__ __forceinline__ float4 load4_rounded_bf16(float4 v) {
  const uint32_t lo = pack_bf16x2(v.x, v.y);
  const uint32_t hi = pack_bf16x2(v.z, v.w);
  return make_float4(__uint_as_float(lo << 16), __uint_as_float(lo & 0xFFFF0000u),
                     __uint_as_float(hi << 16), __uint_as_float(hi & 0xFFFF0000u));
}

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
__device__ __forceinline__ void store1(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store1(uint16_t* p, float v) {
  *p = static_cast<uint16_t>(pack_bf16x2(v, 0.0f) & 0xFFFFu);
}

// The value an activation of storage T holds: v itself (fp32) or v rounded to bf16 (RNE).
template <typename T>
__device__ __forceinline__ float round_to_storage(float v) {
  if constexpr (sizeof(T) == 2) {
    return __uint_as_float(pack_bf16x2(v, 0.0f) << 16);
  } else {
    return v;
  }
}

// RoPE as the CPU's RopeTable: the angle fp32(pos) * freq rounded once in fp32, cos and sin
// evaluated in double and rounded to fp32 (the correctly rounded value but for ~2^-29 of inputs,
// like glibc's cosf / sinf). Returns (cos, sin).
__device__ __forceinline__ float2 rope_cos_sin(int64_t pos, float freq) {
  const float angle = __fmul_rn(static_cast<float>(pos), freq);
  double s = 0, c = 0;
  sincos(static_cast<double>(angle), &s, &c);
  return make_float2(static_cast<float>(c), static_cast<float>(s));
}

// The pair (a, b) rotated by (c, s): (a c - b s, a s + b c) with unfused fp32 products, exactly
// the CPU's expression. The inverse rotation passes -s.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)),
                     __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
}

// The UE8M0 byte of act_quant's scale for a block whose |x| maximum is `amax` (NaN elements
// ignored, as std::max does on the CPU): 2^ceil(log2(fp32(max(amax, 1e-4) * fp32(1/448)))), read
// off the fp32 bits of the (always normal) product, like e8m0_pow2ceil.
__device__ __forceinline__ uint32_t act_scale_byte(float amax) {
  const float a = fmaxf(amax, 1e-4f);
  const float t = __fmul_rn(a, 1.0f / 448.0f);
  const uint32_t u = __float_as_uint(t);
  return (u >> 23) + ((u & 0x7FFFFFu) != 0 ? 1u : 0u);
}

// 2^(127 - byte): the exact reciprocal of the scale (byte in [105, 253] for finite amax).
__device__ __forceinline__ float inv_scale_from_byte(uint32_t byte) {
  return __uint_as_float((254u - byte) << 23);
}

// e4m3 codes of four already scaled values: clamp to +-448 like the reference, then the
// hardware's RNE conversion (satfinite; exact for in-range input, subnormals included).
__device__ __forceinline__ uint32_t e4m3x4(float4 v) {
  const float2 lo =
      make_float2(fminf(fmaxf(v.x, -448.0f), 448.0f), fminf(fmaxf(v.y, -448.0f), 448.0f));
  const float2 hi =
      make_float2(fminf(fmaxf(v.z, -448.0f), 448.0f), fminf(fmaxf(v.w, -448.0f), 448.0f));
  const uint32_t a = __nv_cvt_float2_to_fp8x2(lo, __NV_SATFINITE, __NV_E4M3);
  const uint32_t b = __nv_cvt_float2_to_fp8x2(hi, __NV_SATFINITE, __NV_E4M3);
  return (a & 0xFFFFu) | (b << 16);
}

// The 4 e4m3 codes of `word` (lowest byte first) as fp32, exactly (e4m3 -> f16 -> f32; a NaN code
// gives a NaN).
__device__ __forceinline__ float4 e4m3x4_to_float4(uint32_t word) {
  const __half2 h01(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word & 0xFFFFu), __NV_E4M3));
  const __half2 h23(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> 16), __NV_E4M3));
  const float2 f01 = __half22float2(h01);
  const float2 f23 = __half22float2(h23);
  return make_float4(f01.x, f01.y, f23.x, f23.y);
}

__device__ __forceinline__ float abs_max4(float4 v) {
  return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}

}  // namespace di::ops_detail
