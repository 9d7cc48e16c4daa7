#pragma once

// Warp-level tensor-core and shared-memory matrix primitives (sm_80+ mma.sync / ldmatrix) shared
// by the kernels that use them with these exact operand shapes. Device code only: include from
// .cu files.

#include <cuda_bf16.h>

#include <cstdint>

namespace di::cuda_detail {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 b16 matrices from shared memory; lane l gives the address of row l % 8 of matrix
// l / 8 (16-byte aligned).
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same, each matrix transposed.
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The bits of a bf16 pair (low half first).
__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) {
  return *reinterpret_cast<const uint32_t*>(&v);
}

// An fp32 pair (lo, hi) as three bf16x2 pieces w[0] + w[1] + w[2] = the pair exactly (for normal
// values; the two subtractions are exact): with them an fp32 operand goes through bf16 MMAs with
// every product exact.
struct Bf16Pieces {
  uint32_t w[3];
};
__device__ __forceinline__ Bf16Pieces split3_bf16(float lo, float hi) {
  const __nv_bfloat162 h0 = __floats2bfloat162_rn(lo, hi);
  const float2 f0 = __bfloat1622float2(h0);
  const float rlo = __fsub_rn(lo, f0.x), rhi = __fsub_rn(hi, f0.y);
  const __nv_bfloat162 h1 = __floats2bfloat162_rn(rlo, rhi);
  const float2 f1 = __bfloat1622float2(h1);
  const __nv_bfloat162 h2 = __floats2bfloat162_rn(__fsub_rn(rlo, f1.x), __fsub_rn(rhi, f1.y));
  return {{bf16x2_bits(h0), bf16x2_bits(h1), bf16x2_bits(h2)}};
}

// c += a * b, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace di::cuda_detail
