// CSA2 sparse attention on sm_90a with warpgroup MMAs, bf16 precision (kernels/params/
// sparse_attention.h; the fp32 precision keeps the mma.sync kernel of sparse_attention.cu).
//
// One CTA per (query row, chunk of up to 128 entries), the chunks of a row one cluster, exactly
// the chunking of the mma.sync kernel: chunk 0 is the window (FP8 SWA entries), chunk c >= 1 the
// top-k slots [128 (c - 1), 128 c) (FP4 compressed entries); a DSpark draft block has chunk 0 =
// the ring before the block and chunk 1 = the block's own FP8 entries. Per CTA:
// - Q (64 heads x 512, bf16 as stored) lands in shared memory by cp.async in the wgmma operand
//   layout: 8 panels of 64 values, each panel 64 lines of 128 bytes with the 128-byte swizzle
//   (16-byte chunk c of line r at chunk c ^ (r % 8)).
// - The chunk's entries are read once in two tiles of 64 and dequantised exactly to bf16 into the
//   same layout (line = entry): FP8 codes times their power-of-two scale, FP4 values times their
//   e4m3 scale, each at most 6 significant bits. Tile 1's bytes are loaded before tile 0's
//   products and stored while they run.
// - Two warpgroups. S = Q K^T (64 heads x 64 entries) is split over the head dimension: warpgroup
//   g multiplies dims [256 g, 256 g + 256) (16 wgmma m64n64k16, Q and K from shared memory,
//   K-major), the two fp32 partials are exchanged through shared memory and both warpgroups form
//   S = S_0 + S_1 (fp32 addition commutes: the same bits in both). Both run the same online
//   softmax on all of S (log2 domain; identical m, l and P), and warpgroup g accumulates
//   O[:, 256 g, +256) += P V (4 wgmma m64n256k16: P from registers as bf16, V = the K tile read
//   MN-major).
// - The chunk's unnormalised O, m and l go to shared memory and the row's chunks are merged in
//   chunk order through distributed shared memory (merge_chunks, shared with the mma.sync
//   kernel), then the inverse RoPE of the output tail and the bf16 store.
// - The code is kept small: rolled tile and dequantisation loops, one load and one store site.
//   A decode step gives an SM one or two CTAs, each running the code once, cold, so the
//   instruction fetch bounds it (unrolled, 8,800 instructions: 5.8 no_instruction stalls per
//   issue and twice the mma.sync kernel's cold time).
// Every product grouping and reduction order depends only on the row's own entries, never on
// the batch: rows are bitwise batch-invariant. The bits differ from the mma.sync kernel's (other
// groupings of the same products), so the kernel is chosen by the precision alone.

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/attention/sparse_attention.cuh"
#include "kernels/cuda/attention/sparse_attention_common.cuh"
#include "kernels/cuda/attention/wgmma_bf16.cuh"
#include "kernels/cuda/attention/wgmma_operand_layout.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8_gemm/sm90_primitives.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di::attention_detail {
namespace {

constexpr int kHeads = kAttnHeads;      // 64: the M of one wgmma
constexpr int kDim = kKvDim;            // 512
constexpr int kChunk = kAttnChunk;      // 128 entries per CTA
constexpr int kTile = 64;               // entries per wgmma tile
constexpr int kTiles = kChunk / kTile;  // 2
constexpr int kThreads = 256;           // two warpgroups
using wgmma_layout::kLine;              // a swizzled line: 64 bf16
using wgmma_layout::kOperand;           // Q or one KV tile: 8 panels, 64 KiB
using wgmma_layout::kPanel;             // 64 lines (heads or entries) x 64 values: 8 KiB
using wgmma_layout::opnd_off;           // the operand layout (wgmma_operand_layout.h)
static_assert(kOperand == kHeads * kDim * 2, "an operand is 64 lines of 512 bf16");
constexpr int kORow = kDim + 8;  // fp32 O row stride of the epilogue: rows 32 bytes apart in the
                                 // banks, so a warp's accumulator stores are conflict-free

struct Smem {
  static constexpr int kQ = 0;
  static constexpr int kKv = kQ + kOperand;           // kTiles dequantised tiles
  static constexpr int kX = kKv + kTiles * kOperand;  // S partials: [2 wg][8][128 threads] float4
  static constexpr int kXBytes = 2 * 8 * 128 * 16;
  static constexpr int kPtr = kX + kXBytes;         // [kChunk] entry addresses
  static constexpr int kValid = kPtr + kChunk * 8;  // [4] entry bit masks, 32 entries each
  static constexpr int kRope = kValid + 16;         // [32] cos, [32] sin of the row's position
  static constexpr int kEnd = kRope + 64 * 4;
  static constexpr int kBytes = kEnd + 1024;  // + the alignment of the base to 1024 bytes
  // Epilogue: O [64][kORow] fp32 over Q and the KV tiles; m, l and the merge weights over X.
  static_assert(kHeads * kORow * 4 <= kX, "O over Q and KV");
  static_assert((2 * kHeads + (kMaxChunks + 1) * kHeads) * 4 <= kXBytes, "m, l, weights over X");
};
static_assert(Smem::kBytes <= 227 * 1024, "one CTA per SM");

// A shared-memory matrix descriptor with the 128-byte swizzle (layout type 1 in bits 62-63):
// start address, leading and stride byte offsets, each >> 4.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return ((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

// A K-major operand (S: Q and the K tile); the start advances by 32 bytes per k16 step within a
// panel.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr) {
  return desc_sw128(addr, wgmma_layout::kKMajorLbo, wgmma_layout::kKMajorSbo);
}

// The MN-major V operand (the K tile read transposed for P V): N = value dims in panels of 64,
// K = entries.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t addr) {
  return desc_sw128(addr, wgmma_layout::kMnMajorLbo, wgmma_layout::kMnMajorSbo);
}

// One thread's raw bytes of a tile: 8 units of an FP8 tile (16 codes + the scale byte each) or 4
// of an FP4 tile (32 values + the two scale bytes).
struct Raw {
  uint4 v[8];
  uint32_t s[8];
};

// A tile's raw bytes: 8 units a thread of an FP8 tile (64 entries x 32 units of 16 codes), 4 of
// an FP4 tile (64 entries x 16 units of 32 values); all of a thread's units are of one entry
// (wgmma_layout::unit_entry does not depend on j).
__device__ __forceinline__ void load_tile(bool fp4, const uint8_t* const* ptr, int tile, Raw& raw) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint8_t* e = ptr[tile * kTile + wgmma_layout::unit_entry(warp, lane, 0)];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int unit = wgmma_layout::unit_index(warp, lane, j);
    if (!fp4) {
      load_fp8_unit(e, unit, raw.v[j], raw.s[j]);
    } else if (j < 4) {
      load_fp4_unit(e, unit, raw.v[j], raw.s[j]);
    }
  }
}

// Dequantises the thread's raw bytes of a tile (exactly, to bf16) into the operand layout,
// consuming them: 8 groups of 16 values (an FP8 unit, or one half of an FP4 unit with its own
// scale byte), each two 16-byte chunks of the entry's line. One rolled loop for both formats,
// the groups shifted down through the registers: the kernel's code runs once per CTA, cold, so
// its size is what the instruction fetch pays (unrolled, the three call sites were half the
// kernel).
__device__ __forceinline__ void store_tile(bool fp4, uint8_t* kv, Raw& raw) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int entry = wgmma_layout::unit_entry(warp, lane, 0);  // the same for every j
  if (fp4) {  // unit j (j < 4) -> groups 2 j (values 0..15) and 2 j + 1 (values 16..31)
#pragma unroll
    for (int j = 3; j >= 0; --j) {
      raw.v[2 * j + 1] = make_uint4(raw.v[j].z, raw.v[j].w, 0u, 0u);
      raw.s[2 * j + 1] = raw.s[j] >> 8;
      raw.v[2 * j] = raw.v[j];
      raw.s[2 * j] = raw.s[j] & 0xFFu;
    }
  }
#pragma unroll 1
  for (int g = 0; g < 8; ++g) {
    uint32_t o[8];
    int k;  // the group's 16 values are values [16 k, 16 k + 16) of the entry
    if (fp4) {
      dequant_fp4x16(raw.v[0].x, raw.v[0].y, raw.s[0], o);
      k = 2 * wgmma_layout::unit_index(warp, lane, g / 2) + g % 2;
    } else {
      dequant_fp8x16(raw.v[0], raw.s[0], o);
      k = wgmma_layout::unit_index(warp, lane, g);
    }
    *reinterpret_cast<uint4*>(kv + opnd_off(entry, 2 * k)) = make_uint4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<uint4*>(kv + opnd_off(entry, 2 * k + 1)) = make_uint4(o[4], o[5], o[6], o[7]);
#pragma unroll
    for (int i = 0; i < 7; ++i) {
      raw.v[i] = raw.v[i + 1];
      raw.s[i] = raw.s[i + 1];
    }
  }
}

template <int N>
__device__ __forceinline__ void fence_acc(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    fp8_sm90::fence_regs(r[i]);
}

// Issues (and commits) warpgroup wg's S partial of a tile: Q K^T over dims [256 wg, +256),
// panels 4 wg .. 4 wg + 3, four k16 steps each. The caller waits.
__device__ __forceinline__ void issue_s_partial(float (&s)[32], uint32_t q_addr, uint32_t kv_addr,
                                                int wg) {
  fp8_sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const uint32_t off = static_cast<uint32_t>((4 * wg + k / 4) * kPanel + 32 * (k % 4));
    WgmmaBf16SS<64>::mma(s, desc_k_major(q_addr + off), desc_k_major(kv_addr + off),
                         k == 0 ? 0 : 1);
  }
  fp8_sm90::wgmma_commit();
}

// S = S_0 + S_1 through the exchange buffer (both warpgroups' threads t hold the same (head,
// entry) positions; fp32 addition commutes, so both get the same bits). Every thread of the CTA
// calls it; its barrier also publishes what the threads wrote (and fenced) before it.
__device__ __forceinline__ void exchange_sum(float (&s)[32], float4* s_x, int wg, int t) {
#pragma unroll
  for (int q = 0; q < 8; ++q)
    s_x[(wg * 8 + q) * 128 + t] = make_float4(s[4 * q], s[4 * q + 1], s[4 * q + 2], s[4 * q + 3]);
  __syncthreads();
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const float4 y = s_x[((1 - wg) * 8 + q) * 128 + t];
    s[4 * q] += y.x;
    s[4 * q + 1] += y.y;
    s[4 * q + 2] += y.z;
    s[4 * q + 3] += y.w;
  }
}

// Issues (commits, and waits for) O[:, 256 wg, +256) += P V: P as the A fragments of the four
// k16 steps (entries 16 kk ..), V the tile's panels 4 wg .. 4 wg + 3 read MN-major. `overwrite`:
// the first product replaces O (scale-d 0).
__device__ __forceinline__ void pv(float (&o)[128], const uint32_t (&pa)[4][4], uint32_t kv_addr,
                                   int wg, bool overwrite) {
  fp8_sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t off = static_cast<uint32_t>(4 * wg * kPanel + 16 * kk * kLine);
    WgmmaBf16RS<256>::mma(o, pa[kk], desc_mn_major(kv_addr + off), overwrite && kk == 0 ? 0 : 1);
  }
  fp8_sm90::wgmma_commit();
  fp8_sm90::wgmma_wait<0>();
  fence_acc(o);
}

__global__ void __launch_bounds__(kThreads, 1)
    sparse_attn_wgmma_kernel(const SparseAttnParams p, int chunks) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~static_cast<uintptr_t>(1023));
  uint8_t* s_q = smem + Smem::kQ;
  uint8_t* s_kv = smem + Smem::kKv;
  float4* s_x = reinterpret_cast<float4*>(smem + Smem::kX);
  const uint8_t** s_ptr = reinterpret_cast<const uint8_t**>(smem + Smem::kPtr);
  uint32_t* s_valid = reinterpret_cast<uint32_t*>(smem + Smem::kValid);
  float* s_rope = reinterpret_cast<float*>(smem + Smem::kRope);

  const int row = blockIdx.x;
  const int chunk = blockIdx.y;
  const int tid = threadIdx.x;
  const int wg = tid / 128, t = tid % 128, warp = t / 32, lane = t % 32;

  // Q: 4096 chunks of 16 bytes, chunk u = tid + 256 j of head u / 64, values [8 (u % 64), +8):
  // all of a thread's chunks share column tid % 64. The CTA's first global reads.
  const uint16_t* q_row =
      static_cast<const uint16_t*>(p.q) + static_cast<int64_t>(row) * kHeads * kDim;
  constexpr int kQPer = kHeads * kDim / 8 / kThreads;  // 16
  {
    const uint32_t q_base = cuda_detail::smem_u32(s_q);
    const int c = static_cast<int>(threadIdx.x % 64u), h = static_cast<int>(threadIdx.x / 64u);
#pragma unroll
    for (int j = 0; j < kQPer; ++j) {  // u = tid + 256 j: head h + 4 j, chunk c
      cuda_detail::cp_async16(q_base + opnd_off(h + 4 * j, c), q_row + 8 * (tid + kThreads * j),
                              true);
    }
    cuda_detail::cp_async_commit();
  }
  const int64_t seq = p.seq[row];
  const int64_t pos = p.pos[row];
  // The table's double-precision sincos on warp 4, beside warps 0..3's entry addresses.
  row_rope_table(s_rope, pos, p.rope_freqs, kChunk);
  if (tid < kChunk) {
    const uint8_t* e = chunk_entry(p, row, chunk, tid, seq, pos);
    s_ptr[tid] = e;
    const uint32_t valid = __ballot_sync(0xFFFFFFFFu, e != nullptr);  // warp w: entries 32 w ..
    if (tid % 32 == 0) s_valid[tid / 32] = valid;
  }
  __syncthreads();

  // Tile i (entries 64 i ..) lives in buffer i; a fully masked tile changes nothing and is
  // skipped.
  static_assert(kTiles == 2, "two tiles a chunk: vmask0, vmask1");
  const uint64_t vmask0 = s_valid[0] | (static_cast<uint64_t>(s_valid[1]) << 32);
  const uint64_t vmask1 = s_valid[2] | (static_cast<uint64_t>(s_valid[3]) << 32);
  const bool fp4 = chunk > 0 && p.block_rows == 0;  // a draft block's chunk 1 is FP8 too
  // The first tile with entries is loaded and dequantised now; when both have entries, tile 1's
  // bytes are loaded now too and stored during tile 0's products. One load and one store site
  // (a rolled loop): the code runs cold.
  Raw raw;
#pragma unroll 1
  for (int tile = 0, loaded = 0; tile < kTiles; ++tile) {
    if ((tile == 0 ? vmask0 : vmask1) == 0) continue;
    load_tile(fp4, s_ptr, tile, raw);
    if (loaded++ > 0) break;
    store_tile(fp4, s_kv + tile * kOperand, raw);
  }

  cuda_detail::cp_async_wait<0>();  // this thread's q chunks landed (visible to it)
  // q_rope: the threads of the tail columns (chunks 56..63: panel 7) rotate their own chunks in
  // place, apply_rope's arithmetic and rounding.
  if (p.q_rope && tid % 64 >= (kDim - 64) / 8) {
    const int c = tid % 64;
    const int i0 = 4 * (c - (kDim - 64) / 8);
#pragma unroll 4
    for (int j = 0; j < kQPer; ++j) {
      rope_bf16x8_in_place(reinterpret_cast<uint4*>(s_q + opnd_off((tid + kThreads * j) / 64, c)),
                           i0, s_rope);
    }
  }
  fp8_sm90::fence_proxy_async_smem();  // this thread's shared-memory writes -> the wgmma (async)
                                       // proxy
  __syncthreads();

  const float qk_scale = p.scale * kLog2e;
  const uint32_t q_addr = cuda_detail::smem_u32(s_q);
  // O[heads 16 warp + lane / 4 (+ 8)][dims 256 wg + 8 j + 2 (lane % 4) (+ 1)]: written first by
  // the first tile's P V (scale-d 0), so that its 128 registers are not held through the
  // prologue; zero when the chunk has no entry.
  float o[128];
  bool first = true;
  float m_run[2] = {-INFINITY, -INFINITY};  // rows lane / 4 and lane / 4 + 8 of the warp's 16
  float l_run[2] = {0.0f, 0.0f};

  // Not unrolled: the kernel runs its code once per CTA, so its size is what the instruction
  // cache has to fetch (unrolled, 141 KB: twice as slow in the forward, where it runs cold).
#pragma unroll 1
  for (int tile = 0; tile < kTiles; ++tile) {
    const uint64_t valid = tile == 0 ? vmask0 : vmask1;
    if (valid == 0) continue;
    const uint32_t kv_addr = cuda_detail::smem_u32(s_kv + tile * kOperand);
    float s[32];
    issue_s_partial(s, q_addr, kv_addr, wg);
    if (tile == 0 && vmask1 != 0) {
      store_tile(fp4, s_kv + kOperand, raw);
      fp8_sm90::fence_proxy_async_smem();
    }
    fp8_sm90::wgmma_wait<0>();
    fence_acc(s);

    exchange_sum(s, s_x, wg, t);  // also publishes tile 1's dequantised entries (fenced)

    // Online softmax over the tile's 64 entries; acc i = 4 j + e is entry 8 j + 2 (lane % 4) +
    // e % 2 of row e / 2. The quad of a row's threads reduces by shuffles.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int ent = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
      s[i] = ((valid >> ent) & 1u) ? s[i] * qk_scale : -INFINITY;
      mx[(i % 4) / 2] = fmaxf(mx[(i % 4) / 2], s[i]);
    }
    float m_new[2], alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 2));
      m_new[r] = fmaxf(m_run[r], mx[r]);
      alpha[r] = m_new[r] == -INFINITY ? 1.0f : exp2f(m_run[r] - m_new[r]);
    }
    uint32_t pa[4][4];  // P as the A fragments of the four k16 steps (entries 16 kk ..)
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int r = (i % 4) / 2;
      const float p0 = s[i] == -INFINITY ? 0.0f : exp2f(s[i] - m_new[r]);
      const float p1 = s[i + 1] == -INFINITY ? 0.0f : exp2f(s[i + 1] - m_new[r]);
      rs[r] += p0;
      rs[r] += p1;
      pa[wgmma_layout::pa_step(i)][wgmma_layout::pa_reg(i)] = bf16x2(p0, p1);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rs[r] += __shfl_xor_sync(0xFFFFFFFFu, rs[r], 1);
      rs[r] += __shfl_xor_sync(0xFFFFFFFFu, rs[r], 2);
      l_run[r] = l_run[r] * alpha[r] + rs[r];
      m_run[r] = m_new[r];
    }
    if (!first && (alpha[0] != 1.0f || alpha[1] != 1.0f)) {  // the running max moved
#pragma unroll
      for (int i = 0; i < 128; ++i)
        o[i] *= alpha[(i % 4) / 2];
    }

    pv(o, pa, kv_addr, wg, first);
    first = false;
    if (tile == 0 && vmask1 != 0) __syncthreads();  // both warpgroups read X before its reuse
  }
  if (first) {
#pragma unroll
    for (int i = 0; i < 128; ++i)
      o[i] = 0.0f;
  }
  __syncthreads();  // every wgmma of both warpgroups is done with Q and the tiles

  // The chunk's unnormalised O [64][kORow] over Q / KV, m and l [64][2] and the merge weights
  // over X; then the row's chunks merge in the cluster.
  float* s_o = reinterpret_cast<float*>(smem);
  float* s_ml = reinterpret_cast<float*>(smem + Smem::kX);
  float* s_wt = s_ml + 2 * kHeads;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int col = 256 * wg + 8 * j + 2 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = 16 * warp + lane / 4 + 8 * r;
      *reinterpret_cast<float2*>(s_o + h * kORow + col) =
          make_float2(o[4 * j + 2 * r], o[4 * j + 2 * r + 1]);
    }
  }
  if (wg == 0 && lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = 16 * warp + lane / 4 + 8 * r;
      s_ml[2 * h] = m_run[r];
      s_ml[2 * h + 1] = l_run[r];
    }
  }
  merge_chunks<uint16_t, kHeads, kORow>(p, row, 0, chunk, chunks, s_o, s_ml, s_wt, s_rope);
#endif
}

// The tile products alone, for attention_detail::wgmma_tile_probe (a test of this file's
// operand layout, descriptors and fragment maps, without the entry formats and the softmax):
// Q [64][512] and a KV tile [64][512] bf16 from global memory into the operand layout, then
// s_out [64][64] = Q KV^T (issue_s_partial + exchange_sum) and o_out [64][512] = bf16(S) KV (pv),
// both fp32. One CTA.
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_tile_probe_kernel(const uint16_t* q, const uint16_t* kv, float* s_out, float* o_out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~static_cast<uintptr_t>(1023));
  const int tid = threadIdx.x;
  const int wg = tid / 128, t = tid % 128, warp = t / 32, lane = t % 32;
  for (int u = tid; u < kHeads * kDim / 8; u += kThreads) {
    *reinterpret_cast<uint4*>(smem + Smem::kQ + opnd_off(u / 64, u % 64)) =
        reinterpret_cast<const uint4*>(q)[u];
    *reinterpret_cast<uint4*>(smem + Smem::kKv + opnd_off(u / 64, u % 64)) =
        reinterpret_cast<const uint4*>(kv)[u];
  }
  fp8_sm90::fence_proxy_async_smem();
  __syncthreads();
  const uint32_t q_addr = cuda_detail::smem_u32(smem + Smem::kQ);
  const uint32_t kv_addr = cuda_detail::smem_u32(smem + Smem::kKv);
  float s[32];
  issue_s_partial(s, q_addr, kv_addr, wg);
  fp8_sm90::wgmma_wait<0>();
  fence_acc(s);
  exchange_sum(s, reinterpret_cast<float4*>(smem + Smem::kX), wg, t);
  uint32_t pa[4][4];
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int h = 16 * warp + lane / 4 + 8 * ((i % 4) / 2);
    const int ent = 8 * (i / 4) + 2 * (lane % 4);
    if (wg == 0) *reinterpret_cast<float2*>(s_out + h * kTile + ent) = make_float2(s[i], s[i + 1]);
    pa[wgmma_layout::pa_step(i)][wgmma_layout::pa_reg(i)] = bf16x2(s[i], s[i + 1]);
  }
  float o[128];
  pv(o, pa, kv_addr, wg, true);
#pragma unroll
  for (int i = 0; i < 128; i += 2) {
    const int h = 16 * warp + lane / 4 + 8 * ((i % 4) / 2);
    const int col = 256 * wg + 8 * (i / 4) + 2 * (lane % 4);
    *reinterpret_cast<float2*>(o_out + h * kDim + col) = make_float2(o[i], o[i + 1]);
  }
#endif
}

}  // namespace

void launch_sparse_attention_wgmma(const SparseAttnParams& p, int chunks, cudaStream_t stream) {
  launch_row_clusters(sparse_attn_wgmma_kernel, p, chunks, 1, kThreads, Smem::kBytes, stream);
}

void wgmma_tile_probe(const uint16_t* q, const uint16_t* kv, float* s_out, float* o_out,
                      cudaStream_t stream) {
  constexpr int kBytes = Smem::kX + Smem::kXBytes + 1024;
  DI_CUDA_CHECK(cudaFuncSetAttribute(wgmma_tile_probe_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  wgmma_tile_probe_kernel<<<1, kThreads, kBytes, stream>>>(q, kv, s_out, o_out);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di::attention_detail
