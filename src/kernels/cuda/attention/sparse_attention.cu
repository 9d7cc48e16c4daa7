// CSA2 sparse attention on sm_90 (kernels/params/sparse_attention.h), one launch:
//
// 1. Chunk attention, one CTA per (query row, chunk of up to 128 entries, part of the heads):
//    chunk 0 is the window (FP8 SWA entries), chunk c >= 1 the top-k slots [128 (c - 1), 128 c)
//    (FP4 compressed entries); a DSpark draft block has chunk 0 = the ring before the block and
//    chunk 1 = the block's own FP8 entries. The CTA holds its 64 / kSplit query heads in shared
//    memory (bf16; in fp32 precision as a hi + lo pair of bf16 so that q = hi + lo to ~2^-17
//    relative) and streams its entries in tiles of 32: each entry is read from global memory once
//    per CTA and dequantised to bf16 — exact: an e4m3 code times a power of two, or an e2m1 value
//    times an e4m3 scale, has at most 6 significant bits — into a double-buffered shared tile that
//    its heads use. Tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate) compute S = Q K^T and O
//    += P V; the softmax is the usual online one in the log2 domain. 8 warps in head groups of 16:
//    kSplit 1 (all 64 heads) has 4 groups of 2 warps, a warp taking 16 of a tile's entries for S
//    and 256 value dims for O; kSplit 2 (two CTAs per (row, chunk), for batches whose grid is
//    under a wave) has 2 groups of 4 warps, 8 entries and 128 dims each, which halves each warp's
//    chain of dependent MMAs per tile at the price of dequantising every tile twice. The warps of
//    a group exchange row maxima, row sums and P through shared memory. Both splits give the same
//    bits. The chunk's unnormalised O, its running max m and sum l stay in shared memory.
// 2. Combine: the CTAs of a row (and head part) form one cluster; after a cluster barrier CTA c
//    merges the part's heads c, c + chunks, ... over all chunks through distributed shared memory,
//    in chunk order (fixed, whatever the batch), adds the sink as an extra logit, divides, applies
//    the inverse RoPE of the output tail and stores in the activation precision.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "common/check.h"
#include "kernels/cuda/attention/sparse_attention.cuh"
#include "kernels/cuda/attention/sparse_attention_common.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8_gemm/sm90_primitives.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/paged_table_check.h"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

using attention_detail::bf16_hi;
using attention_detail::bf16_lo;
using attention_detail::bf16x2;
using attention_detail::chunk_entry;
using attention_detail::dequant_fp4x16;
using attention_detail::dequant_fp8x16;
using attention_detail::kLog2e;
using attention_detail::kMaxChunks;
using attention_detail::launch_row_clusters;
using attention_detail::load_fp4_unit;
using attention_detail::load_fp8_unit;
using attention_detail::merge_chunks;
using attention_detail::rope_bf16x8_in_place;
using attention_detail::row_rope_table;

constexpr int kHeads = kAttnHeads;  // 64
constexpr int kDim = kKvDim;        // 512
constexpr int kTile = 32;           // entries per shared tile
constexpr int kChunk = kAttnChunk;  // entries per CTA
constexpr int kThreads = 256;
constexpr int kRowBytes = kDim * 2;       // one bf16 row of Q or KV: 1024 bytes, 64 chunks of 16 B
constexpr int kPRowBytes = 80;            // one P row: 32 bf16 + 16 B pad (conflict-free ldmatrix)
constexpr int kPBytes = 16 * kPRowBytes;  // one head group's 16 x 32 P tile

// The warps' split of a CTA's work for kSplit CTAs per (row, chunk), each with 64 / kSplit heads:
// kGroups head groups of 16 (an mma's rows), kWarps warps per group; a warp takes kWarps-th of a
// tile's entries for S (kNS n8 tiles) and of the value dims for O (kOTiles n8 tiles).
template <int kSplit>
struct Split {
  static_assert(kSplit == 1 || kSplit == 2, "one or two CTAs per (row, chunk)");
  static constexpr int kCtaHeads = kHeads / kSplit;       // 64 or 32
  static constexpr int kGroups = kCtaHeads / 16;          // 4 or 2
  static constexpr int kWarps = kThreads / 32 / kGroups;  // 2 or 4
  static constexpr int kNS = kTile / 8 / kWarps;          // 2 or 1
  static constexpr int kOTiles = kDim / kWarps / 8;       // 32 or 16
};

template <bool kF32, int kSplit>
struct Smem {
  using S = Split<kSplit>;
  static constexpr int kQ = S::kCtaHeads * kRowBytes;                   // q hi
  static constexpr int kQLo = kF32 ? S::kCtaHeads * kRowBytes : 0;      // q lo (fp32 precision)
  static constexpr int kKv = 2 * kTile * kRowBytes;                     // two dequantised tiles
  static constexpr int kP = 2 * S::kGroups * kPBytes * (kF32 ? 2 : 1);  // [parity][group][hi, lo]
  static constexpr int kRed = 2 * 2 * S::kGroups * S::kWarps * 16 * 4;  // [max, sum][par][g][w][16]
  static constexpr int kPtr = kChunk * 8;                               // entry addresses
  static constexpr int kRope = 2 * 32 * 4;                              // [32] cos, [32] sin of pos
  static constexpr int kBytes = kQ + kQLo + kKv + kP + kRed + kPtr + 16 + 2 * 8 + kRope;
  // The epilogue's unnormalised O [kCtaHeads][512] fp32 lies over Q and the KV tiles.
  static_assert(S::kCtaHeads * kDim * 4 <= kQ + kQLo + kKv, "O over Q and KV");
};

// Byte offset of 16-byte chunk c of row r in a 1024-byte-row tile, XOR-swizzled over the 8 chunks
// that share a 128-byte line so that ldmatrix's 8 row addresses hit 8 different bank groups.
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>(r * kRowBytes + ((c ^ (r & 7)) << 4));
}

// swz(r, 8 q + 2 j + b) = r * 1024 + 128 q + off[j] for the lane's row r and bit b: the XOR only
// touches the low three chunk bits, so the unrolled loops add the 128 q part as an immediate.
struct SwzRow {
  uint32_t off[4];
};
__device__ __forceinline__ SwzRow swz_row(int r, int b) {
  SwzRow s;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    s.off[j] = static_cast<uint32_t>(r * kRowBytes + (((2 * j + b) ^ (r & 7)) << 4));
  return s;
}

using cuda_detail::ldsm_x4;
using cuda_detail::ldsm_x4_t;
using cuda_detail::mma_bf16;
using cuda_detail::smem_u32;

// Named barrier of the kWarps warps of head group g (ids 1..kGroups; 0 is __syncthreads).
template <int kWarps>
__device__ __forceinline__ void group_sync(int g) {
  asm volatile("bar.sync %0, %1;" ::"r"(g + 1), "n"(32 * kWarps) : "memory");
}

// Raw bytes of one thread's share of a tile, loaded one tile ahead of their use.
struct Raw {
  uint4 v[4];
  uint32_t s[4];
};

// Window tile (e4m3 + UE8M0 / 32): 32 entries x 32 chunks of 16 codes; thread t takes chunks
// t + 256 j (j < 4): entry c / 32, codes [16 (c % 32), +16), scale byte (c % 32) / 2.
__device__ __forceinline__ void load_fp8(const uint8_t* const* ptr, int tile, Raw& raw) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = threadIdx.x + kThreads * j;
    load_fp8_unit(ptr[tile * kTile + c / 32], c % 32, raw.v[j], raw.s[j]);
  }
}

__device__ __forceinline__ void store_fp8(uint8_t* kv, const Raw& raw) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = threadIdx.x + kThreads * j;
    const int r = c / 32, ch = c % 32;
    uint32_t o[8];
    dequant_fp8x16(raw.v[j], raw.s[j], o);
    *reinterpret_cast<uint4*>(kv + swz(r, 2 * ch)) = make_uint4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<uint4*>(kv + swz(r, 2 * ch + 1)) = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

// Compressed tile (e2m1 pairs + e4m3 / 16): 32 entries x 16 chunks of 32 values; thread t takes
// chunks t + 256 j (j < 2): entry c / 16, values [32 (c % 16), +32), scale bytes 2 (c % 16) +
// {0,1}.
__device__ __forceinline__ void load_fp4(const uint8_t* const* ptr, int tile, Raw& raw) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int c = threadIdx.x + kThreads * j;
    load_fp4_unit(ptr[tile * kTile + c / 16], c % 16, raw.v[j], raw.s[j]);
  }
}

// Dequantised to bf16 exactly (dequant_fp4x16).
__device__ __forceinline__ void store_fp4(uint8_t* kv, const Raw& raw) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int c = threadIdx.x + kThreads * j;
    const int r = c / 16, ch = c % 16;
    const uint32_t w[4] = {raw.v[j].x, raw.v[j].y, raw.v[j].z, raw.v[j].w};
#pragma unroll
    for (int side = 0; side < 2; ++side) {  // 16 values (8 bytes) per e4m3 scale
      uint32_t o[8];
      dequant_fp4x16(w[2 * side], w[2 * side + 1], (raw.s[j] >> (8 * side)) & 0xFFu, o);
      *reinterpret_cast<uint4*>(kv + swz(r, 4 * ch + 2 * side)) =
          make_uint4(o[0], o[1], o[2], o[3]);
      *reinterpret_cast<uint4*>(kv + swz(r, 4 * ch + 2 * side + 1)) =
          make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
}

// Eight consecutive fp32 values (two 16-byte loads).
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// Attention of one (row, chunk, 1 / kSplit of the heads), then the row's chunks merged in its
// cluster. T = float or uint16_t (bf16 bits) activations. Both splits give the same bits: per
// head, S, P and O keep their operations and order, and a tile's row sum adds its four 8-entry
// quarters as (q0 + q1) + (q2 + q3) in either.
template <typename T, int kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_attn_kernel(const SparseAttnParams p, int chunks) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr bool kF32 = sizeof(T) == 4;
  using L = Smem<kF32, kSplit>;
  using S = Split<kSplit>;
  constexpr int kCtaHeads = S::kCtaHeads, kGroups = S::kGroups, kWarps = S::kWarps;
  constexpr int kNS = S::kNS, kOTiles = S::kOTiles;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* s_q = smem;
  uint8_t* s_qlo = s_q + L::kQ;
  uint8_t* s_kv = s_qlo + L::kQLo;
  uint8_t* s_p = s_kv + L::kKv;
  float* s_red = reinterpret_cast<float*>(s_p + L::kP);
  const uint8_t** s_ptr = reinterpret_cast<const uint8_t**>(s_red + L::kRed / 4);
  int* s_tiles = reinterpret_cast<int*>(s_ptr + kChunk);        // [4] entry bit masks per tile
  uint64_t* s_full = reinterpret_cast<uint64_t*>(s_tiles + 4);  // [2] KV buffer b holds its tile
  float* s_rope = reinterpret_cast<float*>(s_full + 2);         // [32] cos, [32] sin

  const int row = blockIdx.x;
  const int chunk = blockIdx.y;
  const int part = blockIdx.z;  // heads [kCtaHeads part, +kCtaHeads)
  const int tid = threadIdx.x;
  const T* q_row =
      static_cast<const T*>(p.q) + (static_cast<int64_t>(row) * kHeads + kCtaHeads * part) * kDim;
  // Q: 16 / kSplit chunks of 8 values per thread; chunk c = tid + 256 j is the CTA's head c / 64,
  // column c % 64 (the same column tid % 64 for all of a thread's chunks).
  constexpr int kPer = kCtaHeads * kDim / 8 / kThreads;
  if constexpr (!kF32) {
    // bf16 storage: q's bytes are its bf16 operand as they are. All of a thread's chunks go into
    // the swizzled tile at once, the CTA's first global reads, in flight beside the entry table.
    const uint32_t q_base = smem_u32(s_q);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = tid + kThreads * j;
      cuda_detail::cp_async16(q_base + swz(c / (kDim / 8), c % (kDim / 8)),
                              q_row + (c / (kDim / 8)) * kDim + 8 * (c % (kDim / 8)), true);
    }
    cuda_detail::cp_async_commit();
  }
  const int64_t seq = p.seq[row];
  const int64_t pos = p.pos[row];

  row_rope_table(s_rope, pos, p.rope_freqs, 0);
  __syncthreads();
  if (tid == kThreads - 1) {
    fp8_sm90::mbar_init(&s_full[0], kThreads / 32);  // one arrival per warp
    fp8_sm90::mbar_init(&s_full[1], kThreads / 32);
  }
  // Entry addresses of this chunk (nullptr = masked) and which tiles hold any entry.
  if (tid < kChunk) {
    const uint8_t* e = chunk_entry(p, row, chunk, tid, seq, pos);
    s_ptr[tid] = e;
    const uint32_t valid = __ballot_sync(0xFFFFFFFFu, e != nullptr);  // warp w = tile w
    if (tid % 32 == 0) s_tiles[tid / kTile] = static_cast<int>(valid);
  }

  // Q rows into shared memory as bf16 (hi) and, in fp32 precision, the bf16 residual (lo);
  // q_rope: each head's tail rotated first, as apply_rope does (rounded to the storage as it
  // stores).
  if constexpr (kF32) {
    // kPer chunks of 8 values per thread, loaded 4 at a time before any is used (one round trip
    // per batch, not per chunk).
#pragma unroll 1
    for (int b = 0; b < kPer; b += 4) {
      float v[4][8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tid + kThreads * (b + j);
        load8(q_row + (c / (kDim / 8)) * kDim + 8 * (c % (kDim / 8)), v[j]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tid + kThreads * (b + j);
        const int h = c / (kDim / 8), ch = c % (kDim / 8);
        if (p.q_rope && ch >= (kDim - 64) / 8) {
          const int i0 = 4 * (ch - (kDim - 64) / 8);  // the chunk's first pair of the tail
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 r = ops_detail::rope_rotate(v[j][2 * i], v[j][2 * i + 1], s_rope[i0 + i],
                                                     s_rope[32 + i0 + i]);
            v[j][2 * i] = r.x;
            v[j][2 * i + 1] = r.y;
          }
        }
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          hi[i] = bf16x2(v[j][2 * i], v[j][2 * i + 1]);
          lo[i] = bf16x2(v[j][2 * i] - bf16_lo(hi[i]), v[j][2 * i + 1] - bf16_hi(hi[i]));
        }
        *reinterpret_cast<uint4*>(s_q + swz(h, ch)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4*>(s_qlo + swz(h, ch)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
    }
  } else {
    cuda_detail::cp_async_wait<0>();  // this thread's chunks landed (visible to it)
    // q_rope: the threads of the tail columns rotate their own chunks in place; the bf16 of the
    // rotated pair is what apply_rope stores and what the register path's hi was.
    const int ch = tid % (kDim / 8);
    if (p.q_rope && ch >= (kDim - 64) / 8) {
      const int i0 = 4 * (ch - (kDim - 64) / 8);  // the column's first pair of the tail
#pragma unroll 4
      for (int j = 0; j < kPer; ++j) {
        rope_bf16x8_in_place(
            reinterpret_cast<uint4*>(s_q + swz((tid + kThreads * j) / (kDim / 8), ch)), i0, s_rope);
      }
    }
  }
  __syncthreads();

  const bool fp4 = chunk > 0 && p.block_rows == 0;  // a draft block's chunk 1 is FP8 too
  // Tiles holding at least one entry, as a bit mask (a fully masked tile changes nothing: its
  // alpha is 1 and its P is 0, so skipping it keeps the result bitwise the same).
  uint32_t tile_mask = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    tile_mask |= s_tiles[i] ? (1u << i) : 0u;

  const int warp = tid / 32, lane = tid % 32;
  const int g = warp / kWarps, qt = warp % kWarps;
  const float qk_scale = p.scale * kLog2e;

  float o[kOTiles][4];  // value dims [kDim / kWarps qt, +kDim / kWarps) of heads [16 g, +16)
#pragma unroll
  for (int i = 0; i < kOTiles; ++i)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};  // rows lane/4 and lane/4 + 8 (log2 domain)
  float l_run[2] = {0.0f, 0.0f};

  Raw raw;
  int tile = tile_mask != 0 ? __ffs(tile_mask) - 1 : 4;
  if (tile < 4) {
    if (fp4) {
      load_fp4(s_ptr, tile, raw);
      store_fp4(s_kv, raw);
    } else {
      load_fp8(s_ptr, tile, raw);
      store_fp8(s_kv, raw);
    }
    __syncwarp();
    if (lane == 0) fp8_sm90::mbar_arrive(&s_full[0]);
  }

  // Tile it lives in buffer it % 2. Each warp stores its slice of the next tile after its math on
  // the current one and arrives on that buffer's barrier; a warp waits for a buffer only when it
  // needs it (no CTA-wide barrier per tile, so the head groups drift apart and overlap their
  // phases). Reuse is safe: a warp storing tile it + 1 (into the buffer of tile it - 1) has passed
  // the wait for tile it, so every warp has finished its math on tile it - 1.
  for (int it = 0; tile < 4; ++it) {
    const int par = it & 1;
    uint8_t* kv = s_kv + par * kTile * kRowBytes;
    fp8_sm90::mbar_wait(&s_full[par], (it / 2) & 1);
    const uint32_t rest = tile_mask & ~((2u << tile) - 1u);
    const int next = rest != 0 ? __ffs(rest) - 1 : 4;
    const bool more = next < 4;
    if (more) {  // next tile's bytes in flight during this tile's math
      if (fp4) {
        load_fp4(s_ptr, next, raw);
      } else {
        load_fp8(s_ptr, next, raw);
      }
    }

    // S = Q K^T for heads [16 g, +16) and the warp's kNS n8 tiles of entries [8 kNS qt, +8 kNS).
    // Two accumulator sets per n-tile (bf16: k mod 2; fp32: the q hi and q lo products) keep
    // 2 kNS mma chains in flight.
    const uint32_t q_base = smem_u32(s_q), qlo_base = smem_u32(s_qlo), kv_base = smem_u32(kv);
    const SwzRow ra = swz_row(16 * g + lane % 16, lane / 16);
    float sv[kNS][4];
    if constexpr (kNS == 2) {
      float sa[2][2][4];
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int n = 0; n < 2; ++n)
          sa[a][n][0] = sa[a][n][1] = sa[a][n][2] = sa[a][n][3] = 0.0f;
      const SwzRow rb = swz_row(16 * qt + lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
      // Chunk 2 k + b of the row: 128 (k / 4) + off[k % 4]; step k + 1's fragments are loaded
      // before step k's mmas.
      auto qk_frag = [&](int k, uint32_t(&fa)[4], uint32_t(&fl)[4], uint32_t(&fb)[4]) {
        const uint32_t dq = ra.off[k % 4] + 128 * (k / 4);
        ldsm_x4(q_base + dq, fa);
        if constexpr (kF32) ldsm_x4(qlo_base + dq, fl);
        ldsm_x4(kv_base + rb.off[k % 4] + 128 * (k / 4), fb);
      };
      uint32_t fa[2][4], fl[2][4], fb[2][4];
      qk_frag(0, fa[0], fl[0], fb[0]);
#pragma unroll
      for (int k = 0; k < kDim / 16; ++k) {
        const int cur = k & 1;
        if (k + 1 < kDim / 16) qk_frag(k + 1, fa[cur ^ 1], fl[cur ^ 1], fb[cur ^ 1]);
        // fp32: hi products into set 0, lo into set 1; bf16: alternate sets by k.
        const int ah = kF32 ? 0 : k % 2;
        mma_bf16(sa[ah][0], fa[cur], fb[cur][0], fb[cur][1]);
        mma_bf16(sa[ah][1], fa[cur], fb[cur][2], fb[cur][3]);
        if constexpr (kF32) {
          mma_bf16(sa[1][0], fl[cur], fb[cur][0], fb[cur][1]);
          mma_bf16(sa[1][1], fl[cur], fb[cur][2], fb[cur][3]);
        }
      }
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sv[n][e] = sa[0][n][e] + sa[1][n][e];
    } else {
      float sa[2][4];
#pragma unroll
      for (int a = 0; a < 2; ++a)
        sa[a][0] = sa[a][1] = sa[a][2] = sa[a][3] = 0.0f;
      // K fragments of steps k, k + 1 (k even) with one ldmatrix.x4: lanes 8 j .. 8 j + 7
      // address entry 8 qt + lane % 8, chunk 2 k + j (j = lane / 8): 128 (k / 4) + kb_off[(k / 2)
      // % 2]; a step pair's fragments are loaded before the previous pair's mmas.
      const int kr = 8 * qt + lane % 8;
      uint32_t kb_off[2];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        kb_off[h] = static_cast<uint32_t>(kr * kRowBytes + (((4 * h + lane / 8) ^ (kr & 7)) << 4));
      auto qk_frag = [&](int k, uint32_t(&fa)[2][4], uint32_t(&fl)[2][4], uint32_t(&fb)[4]) {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const uint32_t dq = ra.off[(k + u) % 4] + 128 * ((k + u) / 4);
          ldsm_x4(q_base + dq, fa[u]);
          if constexpr (kF32) ldsm_x4(qlo_base + dq, fl[u]);
        }
        ldsm_x4(kv_base + kb_off[(k / 2) % 2] + 128 * (k / 4), fb);
      };
      uint32_t fa[2][2][4], fl[2][2][4], fb[2][4];
      qk_frag(0, fa[0], fl[0], fb[0]);
#pragma unroll
      for (int k = 0; k < kDim / 16; k += 2) {
        const int cur = (k / 2) & 1;
        if (k + 2 < kDim / 16) qk_frag(k + 2, fa[cur ^ 1], fl[cur ^ 1], fb[cur ^ 1]);
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          // fp32: hi products into set 0, lo into set 1; bf16: the sets by k mod 2.
          mma_bf16(sa[kF32 ? 0 : u], fa[cur][u], fb[cur][2 * u], fb[cur][2 * u + 1]);
          if constexpr (kF32) mma_bf16(sa[1], fl[cur][u], fb[cur][2 * u], fb[cur][2 * u + 1]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e)
        sv[0][e] = sa[0][e] + sa[1][e];
    }

    // Online softmax over the 32 entries of the tile (rows r = lane/4 and lane/4 + 8); the row
    // maxima and sums of the group's kWarps warps meet in shared memory.
    const uint32_t valid = static_cast<uint32_t>(s_tiles[tile]);  // entry bits of the tile
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kNS; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ent = 8 * (kNS * qt + n) + 2 * (lane % 4) + (e % 2);
        const bool ok = (valid >> ent) & 1u;
        sv[n][e] = ok ? sv[n][e] * qk_scale : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], sv[n][e]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 2));
    }
    constexpr int kRedSet = kWarps * 16;  // [warp of the group][16 rows]
    float* red_max = s_red + ((0 * 2 + par) * kGroups + g) * kRedSet;
    float* red_sum = s_red + ((1 * 2 + par) * kGroups + g) * kRedSet;
    if (lane % 4 == 0) {
      red_max[qt * 16 + lane / 4] = mx[0];
      red_max[qt * 16 + lane / 4 + 8] = mx[1];
    }
    group_sync<kWarps>(g);
    float m_new[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = m_run[r];
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
        m = fmaxf(m, red_max[w * 16 + lane / 4 + 8 * r]);
      m_new[r] = m;
      alpha[r] = m_new[r] == -INFINITY ? 1.0f : exp2f(m_run[r] - m_new[r]);
    }
    // P, and the row sums of each 8-entry quarter of the tile (rq[n]: the warp's n-th).
    uint32_t p_hi[kNS][2], p_lo[kNS][2];  // [n][row pair]: bf16x2 of (e0, e1) and (e2, e3)
    float rq[kNS][2];
#pragma unroll
    for (int n = 0; n < kNS; ++n) {
      float pv[4];
      rq[n][0] = rq[n][1] = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float mr = m_new[e / 2];
        pv[e] = sv[n][e] == -INFINITY ? 0.0f : exp2f(sv[n][e] - mr);
        rq[n][e / 2] += pv[e];
      }
      p_hi[n][0] = bf16x2(pv[0], pv[1]);
      p_hi[n][1] = bf16x2(pv[2], pv[3]);
      p_lo[n][0] = bf16x2(pv[0] - bf16_lo(p_hi[n][0]), pv[1] - bf16_hi(p_hi[n][0]));
      p_lo[n][1] = bf16x2(pv[2] - bf16_lo(p_hi[n][1]), pv[3] - bf16_hi(p_hi[n][1]));
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        rq[n][r] += __shfl_xor_sync(0xFFFFFFFFu, rq[n][r], 1);
        rq[n][r] += __shfl_xor_sync(0xFFFFFFFFu, rq[n][r], 2);
      }
    }
    if (lane % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // Two warps: each adds its quarter pair (q0 + q1 or q2 + q3); four: one quarter each.
        float rs = rq[0][r];
        if constexpr (kNS == 2) rs += rq[kNS - 1][r];
        red_sum[qt * 16 + lane / 4 + 8 * r] = rs;
      }
    }
    // P of this warp's entries into the group's P tile [16 rows][32 entries].
    uint8_t* pt = s_p + (par * kGroups + g) * kPBytes * (kF32 ? 2 : 1);
#pragma unroll
    for (int n = 0; n < kNS; ++n) {
      const int col = 8 * (kNS * qt + n) + 2 * (lane % 4);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int prow = lane / 4 + 8 * r;
        *reinterpret_cast<uint32_t*>(pt + prow * kPRowBytes + col * 2) = p_hi[n][r];
        if constexpr (kF32)
          *reinterpret_cast<uint32_t*>(pt + kPBytes + prow * kPRowBytes + col * 2) = p_lo[n][r];
      }
    }
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {  // max moved
#pragma unroll
      for (int i = 0; i < kOTiles; ++i) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
      }
    }
    group_sync<kWarps>(g);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The tile's row sum: (q0 + q1) + (q2 + q3), whichever warps hold the quarters.
      const int i = lane / 4 + 8 * r;
      float all;
      if constexpr (kWarps == 2) {
        all = red_sum[i] + red_sum[16 + i];
      } else {
        all = (red_sum[i] + red_sum[16 + i]) + (red_sum[32 + i] + red_sum[48 + i]);
      }
      l_run[r] = l_run[r] * alpha[r] + all;
      m_run[r] = m_new[r];
    }

    // O[16 heads, the warp's kDim / kWarps dims] += P[16, 32] V[32, those dims].
    const uint32_t p_base = smem_u32(pt);
    const SwzRow rv = swz_row(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      uint32_t a[4], alo[4];
      const uint32_t pa = p_base + (lane % 16) * kPRowBytes + (16 * ks + 8 * (lane / 16)) * 2;
      ldsm_x4(pa, a);
      if constexpr (kF32) ldsm_x4(pa + kPBytes, alo);
      // V rows 16 ks + (lane % 8) + 8 ((lane / 8) % 2), chunks kOTiles qt + 2 np + lane / 16.
      const uint32_t vb = kv_base + 16 * ks * kRowBytes + 16 * kOTiles * qt;
      // Two n-tile pairs per step (four independent accumulators between dependent mmas), the
      // next step's V fragments loaded first.
      auto v_frag = [&](int np, uint32_t(&b)[4]) {
        ldsm_x4_t(vb + rv.off[np % 4] + 128 * (np / 4), b);
      };
      uint32_t b[2][2][4];
      v_frag(0, b[0][0]);
      v_frag(1, b[0][1]);
#pragma unroll
      for (int np = 0; np < kOTiles / 2; np += 2) {
        const int cur = (np / 2) & 1;
        if (np + 2 < kOTiles / 2) {
          v_frag(np + 2, b[cur ^ 1][0]);
          v_frag(np + 3, b[cur ^ 1][1]);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          mma_bf16(o[2 * (np + u)], a, b[cur][u][0], b[cur][u][1]);
          mma_bf16(o[2 * (np + u) + 1], a, b[cur][u][2], b[cur][u][3]);
        }
        if constexpr (kF32) {
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            mma_bf16(o[2 * (np + u)], alo, b[cur][u][0], b[cur][u][1]);
            mma_bf16(o[2 * (np + u) + 1], alo, b[cur][u][2], b[cur][u][3]);
          }
        }
      }
    }

    if (more) {
      uint8_t* next_kv = s_kv + (par ^ 1) * kTile * kRowBytes;
      if (fp4) {
        store_fp4(next_kv, raw);
      } else {
        store_fp8(next_kv, raw);
      }
      __syncwarp();
      if (lane == 0) fp8_sm90::mbar_arrive(&s_full[par ^ 1]);
    }
    tile = next;
  }
  __syncthreads();  // every warp is done with Q and KV: the epilogue reuses that memory

  // The chunk's unnormalised O [kCtaHeads][512] of the CTA's heads (over the Q / KV buffers, free
  // after the loop's last barrier), m and l [kCtaHeads][2] into shared memory; then the chunks of
  // the row and head part (one cluster) are merged through distributed shared memory, CTA `chunk`
  // producing the part's heads chunk, chunk + chunks, ...
  float* s_o = reinterpret_cast<float*>(smem);
  float* s_ml = s_red;  // [kCtaHeads][2]
#pragma unroll
  for (int nt = 0; nt < kOTiles; ++nt) {
    const int col = 8 * kOTiles * qt + 8 * nt + 2 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = 16 * g + lane / 4 + 8 * r;
      *reinterpret_cast<float2*>(s_o + h * kDim + col) =
          make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
    }
  }
  if (qt == 0 && lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = 16 * g + lane / 4 + 8 * r;
      s_ml[2 * h] = m_run[r];
      s_ml[2 * h + 1] = l_run[r];
    }
  }
  float* s_wt =
      reinterpret_cast<float*>(s_p);  // [kMaxChunks][kCtaHeads] weights, [kCtaHeads] 1/den
  static_assert((kMaxChunks + 1) * kCtaHeads * 4 <= L::kP, "weights in the P buffers");
  merge_chunks<T, kCtaHeads, kDim>(p, row, part, chunk, chunks, s_o, s_ml, s_wt, s_rope);
}

int num_chunks(const SparseAttnParams& p) {
  if (p.block_rows > 0) return 2;  // the ring, the draft block
  return 1 + (p.topk_width + kChunk - 1) / kChunk;
}

template <typename T, int kSplit>
void launch(const SparseAttnParams& p, int chunks, cudaStream_t stream) {
  constexpr bool kF32 = sizeof(T) == 4;
  // Grid (rows, chunks, kSplit), one cluster of `chunks` CTAs per row and head part.
  launch_row_clusters(sparse_attn_kernel<T, kSplit>, p, chunks, kSplit, kThreads,
                      Smem<kF32, kSplit>::kBytes, stream);
}

// Two CTAs per (row, chunk) when twice the grid still fits one wave (one CTA per SM): each CTA's
// serial chain is what bounds a small batch; past a wave the second dequantisation costs more.
template <typename T>
void launch(const SparseAttnParams& p, cudaStream_t stream) {
  const int chunks = num_chunks(p);
  int split = p.head_split;
  if (split == 0) {
    split = 2 * p.rows * chunks <= current_sm_count() ? 2 : 1;
  }
  if (split == 2) {
    launch<T, 2>(p, chunks, stream);
  } else {
    launch<T, 1>(p, chunks, stream);
  }
}

}  // namespace

void sparse_attention(const SparseAttnParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows > 0 && p.rows <= INT32_MAX, "sparse_attention: rows {} out of range", p.rows);
  DI_CHECK(p.q != nullptr && p.out != nullptr && p.seq != nullptr && p.pos != nullptr &&
               p.chunk_start != nullptr && p.chunk_row0 != nullptr && p.sink != nullptr &&
               p.rope_freqs != nullptr,
           "sparse_attention: null q/out/seq/pos/chunk_start/chunk_row0/sink/rope_freqs");
  DI_CHECK(p.heads >= 1 && p.heads <= kAttnGenericMaxHeads,
           "sparse_attention: heads {} must be in [1, {}]", p.heads, kAttnGenericMaxHeads);
  DI_CHECK(p.head_dim >= kSwaScaleBlock && p.head_dim <= kAttnGenericMaxDim &&
               p.head_dim % kSwaScaleBlock == 0,
           "sparse_attention: head_dim {} must be a multiple of {} in [{}, {}]", p.head_dim,
           kSwaScaleBlock, kSwaScaleBlock, kAttnGenericMaxDim);
  // 64 x 512 (V4.1) runs the tensor-core kernel; any other dims (or fp32_reference) the generic
  // one.
  const bool tensor_core = p.heads == kHeads && p.head_dim == kDim && !p.fp32_reference;
  const int max_topk = tensor_core ? 7 * kChunk : kAttnGenericMaxTopk;
  DI_CHECK(p.window > 0 && p.window <= kChunk, "sparse_attention: window {} must be in [1, {}]",
           p.window, kChunk);
  DI_CHECK(p.block_rows >= 0 && p.block_rows <= kChunk,
           "sparse_attention: block_rows {} must be in [0, {}]", p.block_rows, kChunk);
  DI_CHECK(p.block_rows == 0 || (p.topk_width == 0 && p.chunk_kv != nullptr),
           "sparse_attention: a draft block (block_rows {}) reads its entries from chunk_kv and "
           "no top-k (topk_width {})",
           p.block_rows, p.topk_width);
  DI_CHECK(p.topk_width >= 0 && p.topk_width <= max_topk,
           "sparse_attention: topk_width {} must be in [0, {}] ({} heads x {})", p.topk_width,
           max_topk, p.heads, p.head_dim);
  // A table's pages must hold every entry the kernel may address (the ring of ring_block; the
  // top-k indices below comp_entries).
  DI_CHECK(p.ring_block >= 0, "sparse_attention: ring_block {} must be >= 0", p.ring_block);
  check_paged_table("sparse_attention (SWA table)", p.swa, swa_entry_bytes(p.head_dim),
                    static_cast<int64_t>(p.ring_block + 1) * p.window);
  if (p.topk_width > 0) {
    DI_CHECK(p.topk != nullptr, "sparse_attention: top-k of width {} needs indices", p.topk_width);
    DI_CHECK(p.comp_entries > 0,
             "sparse_attention: comp_entries must be positive with a top-k of width {} (indices "
             ">= comp_entries are masked)",
             p.topk_width);
    check_paged_table("sparse_attention (compressed table)", p.comp, comp_entry_bytes(p.head_dim),
                      p.comp_entries);
  }
  DI_CHECK(p.scale > 0.0f, "sparse_attention: scale must be positive, got {}", p.scale);
  const auto aligned = [](const void* ptr, size_t n) {
    return reinterpret_cast<uintptr_t>(ptr) % n == 0;
  };
  if (!tensor_core) {
    // Scalar loads and stores: element alignment suffices; chunk_kv is read bytewise.
    const size_t esz = p.precision == ActPrecision::kF32 ? 4 : 2;
    DI_CHECK(aligned(p.q, esz) && aligned(p.out, esz),
             "sparse_attention: q and out must be aligned to their {}-byte elements", esz);
    DI_CHECK(p.rope_dim >= 0 && p.rope_dim <= p.head_dim && p.rope_dim % 2 == 0,
             "sparse_attention: rope_dim {} must be even and in [0, head_dim {}]", p.rope_dim,
             p.head_dim);
    attention_detail::launch_sparse_attention_generic(p, stream);
    return;
  }
  DI_CHECK(
      aligned(p.q, 16) && aligned(p.out, 16) && (p.chunk_kv == nullptr || aligned(p.chunk_kv, 16)),
      "sparse_attention: q, out and chunk_kv must be 16-byte aligned");
  DI_CHECK(p.rope_dim == 64, "sparse_attention: rope_dim {} (only 64 is built)", p.rope_dim);
  DI_CHECK(p.head_split >= 0 && p.head_split <= 2,
           "sparse_attention: head_split {} must be 0 (by the grid), 1 or 2", p.head_split);
  DI_CHECK(p.tensor_kernel != AttnTensorKernel::kWgmma || p.precision == ActPrecision::kBF16,
           "sparse_attention: the wgmma kernel runs bf16 precision only (tensor_kernel kWgmma "
           "with fp32)");
  if (p.precision == ActPrecision::kBF16 && p.tensor_kernel != AttnTensorKernel::kMmaSync) {
    // wgmma is sm_90a's; elsewhere kAuto takes the mma.sync kernel.
    const bool sm90 = current_sm_major() == 9;
    DI_CHECK(sm90 || p.tensor_kernel == AttnTensorKernel::kAuto,
             "sparse_attention: the wgmma kernel needs an sm_90 device");
    if (sm90) {
      attention_detail::launch_sparse_attention_wgmma(p, num_chunks(p), stream);
      return;
    }
  }
  if (p.precision == ActPrecision::kF32) {
    launch<float>(p, stream);
  } else {
    launch<uint16_t>(p, stream);
  }
}

}  // namespace di
