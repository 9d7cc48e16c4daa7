#pragma once

// Device pieces shared by the two tensor-core kernels of the CSA2 sparse attention
// (sparse_attention.cu: mma.sync, both precisions; sparse_attention_wgmma.cu: wgmma, bf16): the
// chunk's entry addresses, the exact dequantisation of FP8 / FP4 entries to bf16, the in-place
// RoPE of a bf16 q chunk, and the merge of a row's chunks through distributed shared memory.
// Device-only; included by those .cu files alone.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/params/sparse_attention.h"

namespace di::attention_detail {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr int kMaxChunks = 8;  // CTAs of one row's cluster: the window + 7 top-k chunks

__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  return ops_detail::pack_bf16x2(lo, hi);
}
__device__ __forceinline__ float bf16_lo(uint32_t v) {
  return __uint_as_float(v << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t v) {
  return __uint_as_float(v & 0xFFFF0000u);
}

// Two e4m3 codes (low byte first) times a power-of-two scale, as two bf16 (exact).
__device__ __forceinline__ uint32_t e4m3x2_scaled(uint32_t two_codes, float s) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return bf16x2(f.x * s, f.y * s);
}

// 16 e4m3 codes of a window entry times their UE8M0 scale byte, as 8 bf16x2 words (values in
// order, the low half of a word first). Exact.
__device__ __forceinline__ void dequant_fp8x16(const uint4& codes, uint32_t scale_byte,
                                               uint32_t (&o)[8]) {
  const float s = __uint_as_float(scale_byte << 23);  // 2^(byte - 127); byte 0 never written
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[2 * i] = e4m3x2_scaled(w[i] & 0xFFFFu, s);
    o[2 * i + 1] = e4m3x2_scaled(w[i] >> 16, s);
  }
}

// Four e2m1 nibbles (bits [16 i, 16 i + 16) of x, value 4 i + j in nibble j) as two bf16x2 words,
// unscaled: the magnitude's bf16 bytes come from two 8-entry byte tables (prmt), the sign bit is
// moved to bit 15 of each bf16.
__device__ __forceinline__ void e2m1x4_to_bf16(uint32_t x, uint32_t& w0, uint32_t& w1) {
  // bf16 of 0, 0.5, 1, 1.5, 2, 3, 4, 6: high bytes 00 3F 3F 3F 40 40 40 40, low 00 00 80 C0 00 40
  // 80 C0.
  const uint32_t sel = x & 0x7777u;
  const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, sel);
  const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, sel);
  w0 = __byte_perm(lo, hi, 0x5140) | ((x & 0x8u) << 12) | ((x & 0x80u) << 24);
  w1 = __byte_perm(lo, hi, 0x7362) | ((x & 0x800u) << 4) | ((x & 0x8000u) << 16);
}

__device__ __forceinline__ uint32_t hmul2_bf16(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                   *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// 16 e2m1 values of a compressed entry (8 bytes: `lo` then `hi`, even value in the low nibble)
// times their e4m3 scale byte, as 8 bf16x2 words. Exact: e2m1 (2 significant bits) times an e4m3
// scale (4 significant bits, itself exact in bf16) has at most 6 significant bits, so the bf16
// multiply does not round.
__device__ __forceinline__ void dequant_fp4x16(uint32_t lo, uint32_t hi, uint32_t scale_byte,
                                               uint32_t (&o)[8]) {
  const __half_raw hs =
      __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(scale_byte), __NV_E4M3);
  const float sf = __half2float(*reinterpret_cast<const __half*>(&hs));
  const uint32_t s2 = bf16x2(sf, sf);
  const uint32_t w[2] = {lo, hi};
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    e2m1x4_to_bf16(w[b / 2] >> (16 * (b % 2)), o[2 * b], o[2 * b + 1]);
    o[2 * b] = hmul2_bf16(o[2 * b], s2);
    o[2 * b + 1] = hmul2_bf16(o[2 * b + 1], s2);
  }
}

// Unit `unit` (16 bytes) of a window entry e: 16 e4m3 codes and their UE8M0 scale byte (one
// per 32 codes: byte unit / 2 after the 512 codes). A masked entry (nullptr) reads as zero codes
// with scale 2^0.
__device__ __forceinline__ void load_fp8_unit(const uint8_t* e, int unit, uint4& v, uint32_t& s) {
  if (e != nullptr) {
    v = __ldg(reinterpret_cast<const uint4*>(e + 16 * unit));
    s = __ldg(e + kKvDim + unit / 2);
  } else {
    v = make_uint4(0, 0, 0, 0);
    s = 127;
  }
}

// Unit `unit` (16 bytes) of a compressed entry e: 32 packed e2m1 values and their two e4m3 scale
// bytes (one per 16 values, after the 256 code bytes). A masked entry reads as zeros.
__device__ __forceinline__ void load_fp4_unit(const uint8_t* e, int unit, uint4& v, uint32_t& s) {
  if (e != nullptr) {
    v = __ldg(reinterpret_cast<const uint4*>(e + 16 * unit));
    s = __ldg(reinterpret_cast<const uint16_t*>(e + kKvDim / 2 + 2 * unit));
  } else {
    v = make_uint4(0, 0, 0, 0);
    s = 0;
  }
}

// Address of entry i (< kAttnChunk) of chunk `chunk` of query row `row` (sequence seq, position
// pos), nullptr when masked. Chunk 0 is the window (the ring for positions before chunk_start,
// chunk_kv after), chunk c >= 1 the top-k slots [128 (c - 1), 128 c); a DSpark draft block has
// chunk 0 = the ring before the block and chunk 1 = the block's own entries.
__device__ __forceinline__ const uint8_t* chunk_entry(const SparseAttnParams& p, int row, int chunk,
                                                      int i, int64_t seq, int64_t pos) {
  // The entry is position ring_t of the row's SWA ring, entry comp_idx of its compressed cache
  // or row kv_row of chunk_kv (-1: not that one). One paged lookup at the end: its 64-bit
  // divisions are the bulk of the code, which both kernels run cold, once per CTA.
  int64_t ring_t = -1, comp_idx = -1, kv_row = -1;
  if (p.block_rows > 0) {
    if (chunk == 0) {
      const int64_t t = p.chunk_start[row] - p.window + i;
      if (i < p.window && t >= 0) ring_t = t;
    } else if (i < p.block_rows) {
      kv_row = p.chunk_row0[row] + i;
    }
  } else if (chunk == 0) {
    if (i < p.window) {
      const int64_t t = pos - p.window + 1 + i;
      const int64_t cs = p.chunk_start[row];
      if (t >= 0 && t < cs) ring_t = t;
      if (t >= cs && p.chunk_kv != nullptr) kv_row = p.chunk_row0[row] + (t - cs);
    }
  } else {
    const int slot = (chunk - 1) * kAttnChunk + i;
    if (slot < p.topk_width) {
      const int32_t idx = p.topk[static_cast<int64_t>(row) * p.topk_width + slot];
      if (idx >= 0 && idx < p.comp_entries) comp_idx = idx;
    }
  }
  if (kv_row >= 0) return p.chunk_kv + kv_row * kSwaEntryBytes;
  if (comp_idx < 0 && ring_t < 0) return nullptr;
  const bool comp = comp_idx >= 0;
  return paged_entry(
      comp ? p.comp : p.swa, seq,
      comp ? comp_idx : p.ring_block * static_cast<int64_t>(p.window) + ring_t % p.window);
}

// The row's RoPE table for rope_dim 64, written by the 32 threads [first, first + 32): s_rope
// [32] cos, [32] sin of position pos (q's tail under q_rope and the output's inverse rotation).
__device__ __forceinline__ void row_rope_table(float* s_rope, int64_t pos, const float* freqs,
                                               int first) {
  const int i = static_cast<int>(threadIdx.x) - first;
  if (i >= 0 && i < 32) {
    const float2 cs = ops_detail::rope_cos_sin(pos, freqs[i]);
    s_rope[i] = cs.x;
    s_rope[32 + i] = cs.y;
  }
}

// q_rope on a 16-byte chunk of 8 bf16 in shared memory whose first pair is pair i0 of the tail
// (s_rope: [32] cos, [32] sin of the row's position): apply_rope's arithmetic and its rounding
// to bf16, in place.
__device__ __forceinline__ void rope_bf16x8_in_place(uint4* w, int i0, const float* s_rope) {
  const uint4 x = *w;
  uint32_t u[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 r =
        ops_detail::rope_rotate(bf16_lo(u[i]), bf16_hi(u[i]), s_rope[i0 + i], s_rope[32 + i0 + i]);
    u[i] = bf16x2(r.x, r.y);
  }
  *w = make_uint4(u[0], u[1], u[2], u[3]);
}

// The merge of a row's chunks (one cluster of `chunks` CTAs, CTA rank = chunk), called by every
// thread of a 256-thread CTA once it has written its share of the chunk's unnormalised O
// ([kCtaHeads][kORow] fp32, row h at s_o + h * kORow) and of m, l (s_ml: [kCtaHeads][2], log2
// domain) into shared memory (the cluster barrier it starts with publishes them). s_wt ((kMaxChunks
// + 1) * kCtaHeads floats) is scratch. Per head: w_c = 2^(m_c - M), 1 / (sum_c w_c l_c + 2^(sink -
// M)) over the chunks in chunk order (every remote load of a thread issued before use); CTA `chunk`
// then produces heads chunk, chunk + chunks, ... : the weighted sum of the chunks' O in chunk
// order, the inverse RoPE of the last 64 values, stored in the activation precision T. The same
// order whatever the batch.
template <typename T, int kCtaHeads, int kORow>
__device__ __forceinline__ void merge_chunks(const SparseAttnParams& p, int row, int part,
                                             int chunk, int chunks, float* s_o, float* s_ml,
                                             float* s_wt, const float* s_rope) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x;
  cluster.sync();
  if (tid < kCtaHeads) {
    float m[kMaxChunks], l[kMaxChunks];
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      if (c < chunks) {
        const float* ml = cluster.map_shared_rank(s_ml, c);
        m[c] = ml[2 * tid];
        l[c] = ml[2 * tid + 1];
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c)
      if (c < chunks) mx = fmaxf(mx, m[c]);
    float den = 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      if (c < chunks) {
        const float w = (mx == -INFINITY || m[c] == -INFINITY) ? 0.0f : exp2f(m[c] - mx);
        den += w * l[c];
        s_wt[c * kCtaHeads + tid] = w;
      }
    }
    // Nothing visible: the output is zero (the sink alone), weights and 1 / den both 0.
    const float sink = p.sink[kCtaHeads * part + tid];
    s_wt[kMaxChunks * kCtaHeads + tid] =
        mx == -INFINITY ? 0.0f : 1.0f / (den + exp2f(sink * kLog2e - mx));
  }
  __syncthreads();

  constexpr int kDim = kKvDim;
  T* out =
      static_cast<T*>(p.out) + (static_cast<int64_t>(row) * kAttnHeads + kCtaHeads * part) * kDim;
  const int tail0 = kDim - p.rope_dim;
  const int d = 4 * (tid % 128);
  for (int h = chunk + chunks * (tid / 128); h < kCtaHeads; h += 2 * chunks) {
    float4 v[kMaxChunks];
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c)
      if (c < chunks)
        v[c] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(s_o, c) + h * kORow + d);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      if (c < chunks) {
        const float w = s_wt[c * kCtaHeads + h];
        acc.x += w * v[c].x;
        acc.y += w * v[c].y;
        acc.z += w * v[c].z;
        acc.w += w * v[c].w;
      }
    }
    const float inv = s_wt[kMaxChunks * kCtaHeads + h];
    acc.x *= inv;
    acc.y *= inv;
    acc.z *= inv;
    acc.w *= inv;
    if (d >= tail0) {  // the inverse rotation
      const int i0 = (d - tail0) / 2;
      const float2 r0 = ops_detail::rope_rotate(acc.x, acc.y, s_rope[i0], -s_rope[32 + i0]);
      const float2 r1 = ops_detail::rope_rotate(acc.z, acc.w, s_rope[i0 + 1], -s_rope[33 + i0]);
      acc = make_float4(r0.x, r0.y, r1.x, r1.y);
    }
    ops_detail::store4(out + h * kDim + d, acc);
  }
  cluster.sync();  // the other CTAs may still read this CTA's shared memory
}

// Launches kernel(p, chunks) on the grid (rows, chunks, parts) with one cluster of `chunks` CTAs
// per (row, part), `threads` threads and `smem` bytes of dynamic shared memory (the kernel's
// limit raised first: a host-side attribute of the current device's function, set on every
// launch rather than remembered in process-wide state), programmatic dependent launch on (the
// kernels wait first, kernels/cuda/pdl.cuh).
template <typename Kernel>
void launch_row_clusters(Kernel kernel, const SparseAttnParams& p, int chunks, int parts,
                         int threads, int smem, cudaStream_t stream) {
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(chunks),
                     static_cast<unsigned>(parts));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2]{};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = static_cast<unsigned>(chunks);
  attr[0].val.clusterDim.z = 1;
  attr[1] = cuda_detail::pdl_attribute();
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p, chunks));
}

}  // namespace di::attention_detail
