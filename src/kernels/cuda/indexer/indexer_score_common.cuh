#pragma once

// Device helpers shared by the tensor-core indexer scoring kernels (indexer_score.cu: prefill,
// indexer_score_decode.cu: decode). Exactness of the integer dots and of the magic-number
// conversion: the header of indexer_score.cu.

#include <cstdint>

#include "kernels/params/indexer.h"

namespace di::indexer_detail {

constexpr int kScoreBlocks = kIndexDim / kIndexScaleBlock;  // 4 scale blocks per head
constexpr int kStageStride = 36;  // floats per key in a head-sum stage (conflict-free)
// 1.5 * 2^23 as int32 bits: an mma accumulator started at these bits ends as the fp32 bits of
// 1.5 * 2^23 + S (exact for |S| < 2^22), so the int -> float conversion is one fused
// multiply-add instead of a quarter-rate I2F.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

// prmt.b32 in the default mode: byte n of the result is byte (c >> 4n) & 7 of {b, a}, or that
// byte's sign replicated when bit 4n + 3 of c is set (__byte_perm does not expose the latter).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Four e2m1 codes (16 bits, element i in bits 4i..4i+3) -> four int8 values 2 * e2m1 in the
// bytes of the result (element i in byte i).
__device__ __forceinline__ uint32_t e2m1x4_to_s8x4(uint32_t codes) {
  const uint32_t mag = codes & 0x7777u;
  const uint32_t pos = prmt(0x03020100u, 0x0C080604u, mag);  // 0 1 2 3 | 4 6 8 12
  const uint32_t neg = prmt(0xFDFEFF00u, 0xF4F8FAFCu, mag);  // negated
  const uint32_t sign = codes & 0x8888u;
  // Selector 0x9 (byte 1 = 0x80, sign replicated) -> 0xFF where the code is negative, else
  // selector 0x0 (byte 0 = 0x00).
  const uint32_t mask = prmt(0x00008000u, 0u, sign | (sign >> 3));
  return (pos & ~mask) | (neg & mask);
}

// Four int8 values each shifted left by d (0 .. 3; the values stay within [-96, 96]): the word
// shift moves each byte's top bits into the next byte's low d bits, which the mask clears.
__device__ __forceinline__ uint32_t shl_s8x4(uint32_t v, uint32_t d) {
  return (v << d) & (0x01010101u * ((0xFFu << d) & 0xFFu));
}

// c = A * B + init in every element (s8 x s8 -> s32, K = 32); init kMagicBits starts the
// magic-number conversion, 0 a chain added to one that did.
__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1, int init = kMagicBits) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(init));
}

// c = A * B + c.
__device__ __forceinline__ void mma_s8_acc(int (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t load_word(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint32_t*>(p));
}

// 2^(byte - 127) as the reference's e8m0_to_float for bytes 0 .. 254 (byte 0 is 2^-127, a
// subnormal). 255 (NaN) never comes out of the UE8M0 quantiser.
__device__ __forceinline__ float scale_from_byte(uint32_t byte) {
  return __uint_as_float(max(byte << 23, 0x00400000u));
}

__device__ __forceinline__ float neg_inf() {
  return -__int_as_float(0x7F800000);
}

// Lane g's accumulator rows hold heads 4g .. 4g + 3 (A row R of M-tile m is head 4 (R % 8) + 2m +
// R / 8): its four outputs for one key go to that key's stage row as one 16-byte store (with
// stride 36 the 8 lanes of a quarter-warp, (g, t) for keys 2t + e, hit 32 distinct banks).
__device__ __forceinline__ void stage_heads(float* stage, int key_row, int g, const float (&v)[4]) {
  *reinterpret_cast<float4*>(stage + key_row * kStageStride + 4 * g) =
      make_float4(v[0], v[1], v[2], v[3]);
}

// The uniform path's outputs of one tile: c[m][v] holds magic + S of head 4g + 2m + v / 2 and
// key 2t + v % 2 (S the chained integer dot, exact), ks[e] the common scale of key 2t + e, qw[s]
// qs * w of head 4g + s (exact). relu(S * ks) * (qs * w) is the reference's relu(dot) * w with
// its one rounding: (magic + S) * ks - magic * ks is S * ks exactly, qs > 0 is a power of two.
__device__ __forceinline__ void stage_uniform_tile(const int (&c)[2][4], const float (&ks)[2],
                                                   const float (&qw)[4], float* stage, int key_row0,
                                                   int g, int t) {
  const float nmk[2] = {__fmul_rn(-kMagic, ks[0]), __fmul_rn(-kMagic, ks[1])};
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float v[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const float sk = __fmaf_rn(__int_as_float(c[s / 2][2 * (s % 2) + e]), ks[e], nmk[e]);
      v[s] = __fmul_rn(fmaxf(sk, 0.0f), qw[s]);
    }
    stage_heads(stage, key_row0 + 2 * t + e, g, v);
  }
}

// Lane L: the ordered sum over the 32 heads of stage row L.
__device__ __forceinline__ float head_sum(const float* stage, int lane) {
  const float4* terms = reinterpret_cast<const float4*>(stage + lane * kStageStride);
  float score = 0.0f;
#pragma unroll
  for (int h4 = 0; h4 < kIndexHeads / 4; ++h4) {
    const float4 v = terms[h4];
    score = __fadd_rn(score, v.x);
    score = __fadd_rn(score, v.y);
    score = __fadd_rn(score, v.z);
    score = __fadd_rn(score, v.w);
  }
  return score;
}

}  // namespace di::indexer_detail
