// Routed-expert FFN on the GPU (kernels/params/moe.h), decode regime: the FP4 expert weights are
// streamed once per step at close to HBM speed, every tile of <= 8 pairs of an expert reads its
// expert's weights once.
//
// moe_expert_gemm: grid (split x 128-column slices of the mats * n outputs, expert tiles); at
//   k >= 4096 (w1 | w3) the two CTAs of a slice form a cluster and split K in halves, below it
//   (w2, k = 2304) one CTA takes the whole K: a fixed split, a function of k only. 4 CTAs per SM.
//   Each of the CTA's 4 warps (one warpgroup) owns 16 rows of each of the CTA's m64 tiles (two;
//   one where two would leave SM slots idle, moe_expert_cta_mtiles) and streams them through its
//   own cp.async ring (5 stages of 128 K-columns = 4 scale blocks = 2 KiB with two tiles: one K
//   tile of the tiled codes, two contiguous 1 KiB runs; 10 stages of 1 KiB with one tile); the same
//   copy groups bring the stage's activations (8 tokens x 4 blocks, gathered through pair_index for
//   w1/w3, a quarter per warp) into a CTA ring, so nothing waits for a prologue. Hopper has no FP4
//   tensor cores; an e2m1 nibble becomes an e4m3 byte with sign at bit 7 and the three magnitude
//   bits at bits 4..2 — that byte is the e2m1 value times 2^-6 exactly (normal and subnormal codes
//   alike), and 2^6 goes into the scale; the upload's bit order (fp4_expert_encode_byte) makes that
//   one mask for the even nibbles and two shifts and masks for the odd ones. The even and odd
//   nibbles of a byte land in different registers, so the tensor-core K order inside a 32-block is
//   "even elements, then odd ones": the activations come in that order (moe_interleave_act /
//   moe_swiglu_quant's interleaved output), which leaves every 32-block's dot product unchanged.
//   Per stage: 8 wgmma m64n8k32 e4m3 with the weights from registers and the activations from
//   shared memory, each from zero (exact inputs), then promoted into the fp32 accumulators as
//   (partial * 2^(e_w + 6)) * 2^(e_x) in ascending block order; the second half's sums are added to
//   the first's through distributed shared memory. Nothing depends on the other pairs of the tile
//   (batch-invariant rows).
// moe_expert_tiles: one CTA scans the per-expert pair counts (CUB block scan) into tiles.
// moe_swiglu_quant: 8 lanes per 32-block; the CPU's element arithmetic, then act_quant.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "common/check.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8_gemm/sm90_primitives.cuh"
#include "kernels/cuda/moe/expert_tiles.cuh"
#include "kernels/cuda/moe/moe_expert.cuh"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wgmma_operands.cuh"

namespace di {
namespace {

namespace cg = cooperative_groups;

using cuda_detail::cp_async16;
using cuda_detail::cp_async4;
using cuda_detail::cp_async_commit;
using cuda_detail::cp_async_wait;

constexpr int kWarps = 4;   // one warpgroup
constexpr int kBlocks = 4;  // scale blocks of 32 K-columns per stage (8 measured 10-20 % slower)
constexpr int kStageCols = 32 * kBlocks;
static_assert(kStageCols == kFp4TileCols && 64 % kFp4TileRows == 0,
              "a stage is one K tile of the tiled FP4 codes");
// e2m1 code bytes per warp and stage with `mtiles` wgmma m64 tiles per CTA (the warp's 16 rows
// of each).
__host__ __device__ constexpr int stage_bytes(int mtiles) {
  return 16 * mtiles * kStageCols / 2;
}
constexpr int kStages = 5;  // ring stages with two m64 tiles per CTA
__host__ __device__ constexpr int ring_stages(int mtiles) {
  return kStages * 2 / mtiles;
}
// K halves per 128-row slice (a 2-CTA cluster) from this k up; below it one CTA streams the whole
// K. w2's k = 2304 is 18 stages: halves of 9 stages behind a 5-stage ring spend a large part of
// their time filling and draining it.
constexpr int64_t kSplitMinK = 4096;
int k_split(int64_t k) {
  return k >= kSplitMinK ? 2 : 1;
}
constexpr int kBStageBytes = kBlocks * 256;  // a stage's activations of 8 tokens (32 B a block)
constexpr int kTilesThreads = 1024;
constexpr int64_t kMaxK = 12288;

// Shared memory: the warps' weight rings, the activation ring, the half's activation scales and
// weight scales (4 CTAs per SM at k = 5120 with one token group, 2 with eight).
__host__ __device__ constexpr int64_t gemm_smem_bytes(int64_t k, int groups, int split,
                                                      int mtiles) {
  const int64_t kbl_max = kBlocks * (((k / 32 + kBlocks - 1) / kBlocks + split - 1) / split);
  return int64_t{kWarps} * ring_stages(mtiles) * stage_bytes(mtiles) +
         int64_t{ring_stages(mtiles)} * groups * kBStageBytes +
         (8 * groups + int64_t{kWarps} * 16 * mtiles) * kbl_max;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_ptr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// d = A(64 x 32 e4m3, registers: this warp's 16 rows) * B(32 x 8 e4m3, shared memory), fp32,
// overwriting d (scale-d = 0).
__device__ __forceinline__ void wgmma_rs_m64n8k32(float (&d)[4], const uint32_t (&a)[4],
                                                  uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, "
      "1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0));
}

// d = A(64 x 32 e4m3, registers) * B(32 x 64 e4m3, shared memory: the 8 groups of a prefill
// tile), fp32, overwriting d. d[4 j + e] is group j's d[e] of wgmma_rs_m64n8k32: the wgmma's
// result per element does not depend on N (the FP8 GEMM's rows are bitwise the same between its
// N = 8 .. 64 swapped tiles and its N = 64 halves), so a pair's outputs stay those of the decode
// tiles.
__device__ __forceinline__ void wgmma_rs_m64n64k32(float (&d)[32], const uint32_t (&a)[4],
                                                   uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " DI_WGMMA_DREGS32
      ", {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
      : DI_WGMMA_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0));
}

// Descriptor of one activation block: 8 tokens x 32 K-slots, K-major, no swizzle: two 8 x 16-byte
// core matrices (slots 0-15, then 16-31) 128 bytes apart (leading byte offset); the next 8
// tokens' block `group_stride` bytes on (stride byte offset; read by the N = 64 wgmma only).
__device__ __forceinline__ uint64_t act_block_desc(const void* block, uint32_t group_stride = 256) {
  const auto addr = static_cast<uint64_t>(__cvta_generic_to_shared(block));
  return ((addr & 0x3FFFFull) >> 4) | ((128ull >> 4) << 16) |
         (static_cast<uint64_t>(group_stride >> 4) << 32);
}

// Byte offset of 16-byte chunk c (scale block c of the stage) of ring row r: swizzled so that
// ldmatrix's 8 row addresses of one block hit 8 different bank groups.
__device__ __forceinline__ int ring_offset(int r, int c) {
  return r * (kStageCols / 2) + ((c ^ ((r >> 1) & 3)) << 4);
}

// kGroups 8-token groups per tile (1: decode, 8: prefill); every group goes through the same
// promotion, and its wgmma products are those of m64n8k32 whether one instruction covers one
// group or all eight (m64n64k32), so a pair's result does not depend on kGroups.
// kMTiles wgmma m64 tiles (64 weight rows each) per CTA: an output's arithmetic is the same
// either way, so the launch picks 1 where 2 would leave SM slots idle.
template <int kGroups, int kSplit, int kMTiles>
__global__ void __cluster_dims__(kSplit, 1, 1) __launch_bounds__(kWarps * 32, kGroups == 1 ? 4 : 2)
    moe_expert_gemm_kernel(const MoeExpertGemmParams p) {
  constexpr int kWarpRows = 16 * kMTiles;  // rows 16 w .. 16 w + 15 of each m64 tile
  constexpr int kCtaRows = 64 * kMTiles;
  constexpr int kStageBytes = stage_bytes(kMTiles);
  // Ring depth: one m64 tile per CTA halves a stage, so the ring doubles (the same bytes in flight
  // per warp as two tiles).
  constexpr int kRing = ring_stages(kMTiles);
  // With tiles_early the tile, the weight scales and the first stages' weights are read before
  // the wait (none is written by the preceding launch), the activations after it.
  if (!p.tiles_early) cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr int kTok = 8 * kGroups;
  extern __shared__ __align__(128) uint8_t smem[];
  const MoeExpertTile tile = p.tiles[blockIdx.y];
  if (tile.expert < 0) {  // uniform over the CTA
    if (p.tiles_early) cuda_detail::pdl_wait();
    return;
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int kb = static_cast<int>(p.k / 32);
  // This CTA's half of K (cluster rank 0: the first ceil(stages / 2) stages), in whole stages;
  // all of it without a split.
  static_assert(kSplit == 1 || kSplit == 2, "K in one CTA or in two halves");
  const int rank = static_cast<int>(blockIdx.x) % kSplit;
  const int total_stages = (kb + kBlocks - 1) / kBlocks;
  const int half_stages = (total_stages + kSplit - 1) / kSplit;
  const int s0 = rank == 0 ? 0 : half_stages;
  const int nstages = rank == 0 ? half_stages : total_stages - half_stages;
  const int blk0 = kBlocks * s0;                                     // first block of the half
  const int kbl = max(0, min(kb, kBlocks * (s0 + nstages)) - blk0);  // its blocks
  const int kbl_max = kBlocks * half_stages;                         // shared-memory rows of scales
  uint8_t* ring = smem + warp * kRing * kStageBytes;
  uint8_t* bring = smem + kWarps * kRing * kStageBytes;  // activation stages
  uint8_t* sx = bring + kRing * kGroups * kBStageBytes;
  uint8_t* sw = sx + kTok * kbl_max + warp * kWarpRows * kbl_max;

  // The CTA's m64 tiles (n % 64 == 0: a tile lies in one matrix); a tile past the end repeats
  // the last one (computed, never stored).
  const int64_t out_cols = p.mats * p.n;
  const int64_t cta_col0 = static_cast<int64_t>(blockIdx.x / kSplit) * kCtaRows;
  const int mtiles = cta_col0 + 64 < out_cols ? kMTiles : 1;
  const uint8_t* wcodes[kMTiles];
  const uint8_t* wscales[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    const int64_t col = cta_col0 + 64 * min(mt, mtiles - 1);
    const int64_t mat = col / p.n, row = col - mat * p.n + 16 * warp;
    const Fp4ExpertMatrix m = p.weights[mat * p.experts + tile.expert];
    wcodes[mt] = m.codes + fp4_expert_code_offset(row, 0, p.k);  // tiled: a stage is a K tile
    wscales[mt] = m.scales + row * kb;
  }
  // Weights: the lane's 2 kMTiles 16-byte chunks of a stage are block lane % 4 of the local rows
  // lane / 4 + 8 i (tile i / 2); the warp's 16 rows of a K tile are 1 KiB contiguous. Activations:
  // warp w copies block w of the stage for every group, chunk j = lane + 32 i being group j / 16,
  // token (j & 15) / 2, the even or odd half by j % 2, from the interleaved rows (kGroups = 1:
  // lanes 0-15 only).
  // Lane-constant addresses, so that a stage's copies are its slot and stage offsets added to
  // them: chunk i of the weights is row (lane / 4 + 8 i) % 16 of tile i / 2, whose ring offset is
  // chunk 0's + 512 i (the swizzle depends on the row only through (row / 2) % 4).
  const int wc = lane % kBlocks;
  const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  const uint32_t wdst0 = ring_s + static_cast<uint32_t>(ring_offset(lane >> 2, wc));
  const uint8_t* wsrc[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
    wsrc[mt] = wcodes[mt] + (lane >> 2) * kFp4TileRowBytes + wc * 16;
  // Local stage s = stage s0 + s of K, into ring slot `slot`: the warp's weights (issue_w), its
  // part of the activations (issue_x).
  auto issue_w = [&](int s, int slot) {
    const int gs = s0 + s;
    const bool valid = gs * kBlocks + wc < kb;  // only the last stage can be partial
    const int64_t go = valid ? int64_t{gs} * kFp4TileBytes : 0;
    const uint32_t dst = wdst0 + static_cast<uint32_t>(slot * kStageBytes);
#pragma unroll
    for (int i = 0; i < 2 * kMTiles; ++i)
      cp_async16(dst + 512 * i, wsrc[i / 2] + go + (i % 2) * 8 * kFp4TileRowBytes, valid);
  };
  // Copy group 0: the half's scale blocks [blk0, blk0 + kbl) of the warp's weight rows and of
  // the tile's tokens (4-byte copies when k / 32 % 4 == 0: every real shape; else plain loads),
  // the first stage (with tiles_early: the weights of all kRing - 1 first stages, issued before
  // the wait); groups 1 .. kRing - 2: the next stages.
  const bool words = kb % 4 == 0;
  const int wpr = words ? kbl / 4 : kbl;  // copies per row
  if (wpr > 0) {
    int r = lane / wpr, w = lane - (lane / wpr) * wpr;  // (row, copy) of this lane, then + 32
    const int dr = 32 / wpr, dw = 32 - dr * wpr;
    for (; r < 16; r += dr, w += dw) {
      if (w >= wpr) {
        w -= wpr;
        ++r;
        if (r >= 16) break;
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        uint8_t* dst = sw + mt * 16 * kbl_max + r * kbl_max;
        const uint8_t* src = wscales[mt] + r * kb + blk0;
        if (words) {
          cp_async4(dst + 4 * w, src + 4 * w, true);
        } else {
          dst[w] = src[w];
        }
      }
    }
  }
  if (p.tiles_early) {
    for (int s = 0; s < kRing - 1 && s < nstages; ++s)
      issue_w(s, s);
    cuda_detail::pdl_wait();
  }
  constexpr int kBIter = kGroups == 1 ? 1 : kGroups / 2;
  const uint8_t* bsrc[kBIter];
  uint32_t bdst[kBIter];
  bool btok[kBIter];
  const uint32_t bring_s = static_cast<uint32_t>(__cvta_generic_to_shared(bring));
#pragma unroll
  for (int i = 0; i < kBIter; ++i) {
    const int j = lane + 32 * i;
    const int t = (j >> 4) * 8 + ((j & 15) >> 1);
    btok[i] = j < 16 * kGroups && t < tile.count;
    const int64_t pair = tile.first_pair + min(t, tile.count - 1);
    bsrc[i] = p.xq + (p.pair_index != nullptr ? p.pair_index[pair] / p.topk : pair) * p.k +
              warp * 32 + (j & 1) * 16;
    bdst[i] = bring_s + static_cast<uint32_t>((j >> 4) * kBStageBytes + warp * 256 + (j & 1) * 128 +
                                              ((j & 15) >> 1) * 16);
  }
  auto issue_x = [&](int s, int slot) {
    const int gs = s0 + s;
    const uint32_t boff = static_cast<uint32_t>(slot * kGroups * kBStageBytes);
    const bool bblock = gs * kBlocks + warp < kb;
#pragma unroll
    for (int i = 0; i < kBIter; ++i) {
      if (lane + 32 * i >= 16 * kGroups) break;
      const bool ok = btok[i] && bblock;
      cp_async16(bdst[i] + boff, bsrc[i] + (ok ? gs * kStageCols : 0), ok);
    }
  };
  for (int t = warp; t < kTok; t += kWarps) {  // a warp per token
    const bool valid = t < tile.count;
    const int64_t pair = tile.first_pair + (valid ? t : 0);
    const int64_t arow = p.pair_index != nullptr ? p.pair_index[pair] / p.topk : pair;
    const uint8_t* src = p.xq_scale + arow * kb + blk0;
    if (words) {
      for (int c = lane; c < kbl / 4; c += 32)
        cp_async4(sx + t * kbl_max + 4 * c, src + 4 * c, valid);
    } else {
      for (int c = lane; c < kbl; c += 32)
        sx[t * kbl_max + c] = valid ? src[c] : uint8_t{0};
    }
  }
  for (int s = 0; s < kRing - 1; ++s) {
    if (s < nstages) {
      if (!p.tiles_early) issue_w(s, s);
      issue_x(s, s);
    }
    cp_async_commit();
  }

  const int g = lane >> 2, t4 = lane & 3;
  const int lm_row = ((lane >> 3) & 1) * 8 + (lane & 7), lm_blk = lane >> 4;
  // This thread's scale bytes (indexed by the block in the half): weight rows g, g + 8 of each
  // tile; tokens 2 t4 and 2 t4 + 1 of each group.
  const uint8_t* swp[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    swp[mt][0] = sw + (mt * 16 + g) * kbl_max;
    swp[mt][1] = sw + (mt * 16 + g + 8) * kbl_max;
  }
  float acc[kGroups][kMTiles][4] = {};
  // The stage loop; kOne: a decode tile of one pair (every tile at batch 1), whose odd token
  // columns 2 t4 + 1 are never stored, so their promotion is skipped (the outputs of the stored
  // column are the same operations either way).
  auto stage_loop = [&]<bool kOne>() {
    int slot = 0, next_slot = kRing - 1;  // ring slots of stage s and of stage s + kRing - 1
    for (int s = 0; s < nstages; ++s) {
      cp_async_wait<kRing - 2>();
      fp8_sm90::fence_proxy_async_smem();  // this thread's copies of the stage -> the wgmma (async)
                                           // proxy
      __syncthreads();  // every warp's part of the stage's activations has landed
      const uint8_t* st = ring + slot * kStageBytes;
      // A fragments: per block and tile, rows g / g + 8, even then odd nibbles. The blocks past k
      // of a partial last stage are zero (zero-filled copies), and not promoted.
      uint32_t a[4][kMTiles][4];
#pragma unroll
      for (int bp = 0; bp < 2; ++bp) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          uint32_t w[4];
          ldmatrix_x4(w, st + ring_offset(mt * 16 + lm_row, 2 * bp + lm_blk));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            a[2 * bp + h][mt][0] = fp4_expert_even_e4m3(w[2 * h]);
            a[2 * bp + h][mt][1] = fp4_expert_even_e4m3(w[2 * h + 1]);
            a[2 * bp + h][mt][2] = fp4_expert_odd_e4m3(w[2 * h]);
            a[2 * bp + h][mt][3] = fp4_expert_odd_e4m3(w[2 * h + 1]);
          }
        }
      }
      const int lb = s * kBlocks;  // the stage's first block in the half
      // The weight scales, 2^(e_w - 127) * 2^6 = the float with exponent field e_w + 6 (a
      // prefill tile reads each once per block for its 8 groups).
      auto sw_load = [&](int b, int mt, int h) {
        return __uint_as_float((static_cast<uint32_t>(swp[mt][h][lb + b]) + 6) << 23);
      };
      auto sw_of = sw_load;
      const uint8_t* bstage = bring + slot * kGroups * kBStageBytes;
      if constexpr (kGroups == 1) {
        // Per group: 8 wgmma from zero, then the promotion; the next group's wgmmas are in flight
        // while a group is promoted (two partial sets).
        float d[2][4][kMTiles][4];
        auto issue_group = [&](int gi) {
          const uint64_t desc0 = act_block_desc(bstage + gi * kBStageBytes);
          fp8_sm90::wgmma_fence();
#pragma unroll
          for (int b = 0; b < 4; ++b)
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt)
              wgmma_rs_m64n8k32(d[gi & 1][b][mt], a[b][mt], desc0 + b * (256 >> 4));
          fp8_sm90::wgmma_commit();
        };
        auto promote_group = [&](int gi) {
          const uint8_t* sxp0 = sx + (8 * gi + 2 * t4) * kbl_max + lb;
          const uint8_t* sxp1 = sxp0 + kbl_max;
          auto sxp1_of = [&](int b) {
            return __uint_as_float(static_cast<uint32_t>(sxp1[b]) << 23);
          };
          auto promote = [&](int b) {
            const float sx0 = __uint_as_float(static_cast<uint32_t>(sxp0[b]) << 23);  // 2^(e_x-127)
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              float* dd = d[gi & 1][b][mt];
#pragma unroll
              for (int i = 0; i < 4; ++i)
                fp8_sm90::fence_regs(dd[i]);
              const float sw0 = sw_of(b, mt, 0), sw1 = sw_of(b, mt, 1);
              acc[gi][mt][0] = fmaf(dd[0] * sw0, sx0, acc[gi][mt][0]);
              acc[gi][mt][2] = fmaf(dd[2] * sw1, sx0, acc[gi][mt][2]);
              if constexpr (!kOne) {  // the odd tokens 2 t4 + 1
                acc[gi][mt][1] = fmaf(dd[1] * sw0, sxp1_of(b), acc[gi][mt][1]);
                acc[gi][mt][3] = fmaf(dd[3] * sw1, sxp1_of(b), acc[gi][mt][3]);
              }
            }
          };
          if (lb + 4 <= kbl) {
#pragma unroll
            for (int b = 0; b < 4; ++b)
              promote(b);
          } else {  // the partial last stage: its blocks past k are not promoted
#pragma unroll
            for (int b = 0; b < 4; ++b)
              if (lb + b < kbl) promote(b);
          }
        };
        issue_group(0);
#pragma unroll
        for (int gi = 0; gi < kGroups; ++gi) {
          if (gi + 1 < kGroups) {
            issue_group(gi + 1);
            fp8_sm90::wgmma_wait<1>();
          } else {
            fp8_sm90::wgmma_wait<0>();
          }
          promote_group(gi);
        }
      } else {
        // Prefill tiles (8 groups): per (block, m64 tile) one wgmma at N = 64 (all groups at
        // once, one instruction instead of 8), then every group's promotion of it; the next
        // (block, tile)'s wgmma is in flight meanwhile (two partial sets of 32 registers). Per
        // output element the operations and their order (K order) are the per-group loop's.
        static_assert(kGroups == 8, "the N = 64 wgmma covers 8 groups");
        constexpr int kUnits = 4 * kMTiles;  // (block, tile) = (u / kMTiles, u % kMTiles)
        float dn[2][32];
        auto issue_unit = [&](int u) {
          const int b = u / kMTiles, mt = u % kMTiles;
          fp8_sm90::wgmma_fence();
          wgmma_rs_m64n64k32(dn[u & 1], a[b][mt], act_block_desc(bstage + b * 256, kBStageBytes));
          fp8_sm90::wgmma_commit();
        };
        // The block's activation scales (8 groups x tokens 2 t4, 2 t4 + 1), read at its first
        // tile and kept for the second.
        float sxf[kGroups][2];
        const uint8_t* sx_t = sx + 2 * t4 * kbl_max + lb;  // token 2 t4's scale bytes, this stage
        auto promote_unit = [&](int u) {
          const int b = u / kMTiles, mt = u % kMTiles;
          float* dd = dn[u & 1];
#pragma unroll
          for (int i = 0; i < 32; ++i)
            fp8_sm90::fence_regs(dd[i]);
          if (lb + b >= kbl) return;  // a partial last stage: its blocks past k are not promoted
          if (mt == 0) {
#pragma unroll
            for (int gi = 0; gi < kGroups; ++gi) {
              const uint8_t* q = sx_t + 8 * gi * kbl_max + b;
              sxf[gi][0] = __uint_as_float(static_cast<uint32_t>(q[0]) << 23);
              sxf[gi][1] = __uint_as_float(static_cast<uint32_t>(q[kbl_max]) << 23);
            }
          }
          const float sw0 = sw_of(b, mt, 0), sw1 = sw_of(b, mt, 1);
#pragma unroll
          for (int gi = 0; gi < kGroups; ++gi) {
            acc[gi][mt][0] = fmaf(dd[4 * gi + 0] * sw0, sxf[gi][0], acc[gi][mt][0]);
            acc[gi][mt][2] = fmaf(dd[4 * gi + 2] * sw1, sxf[gi][0], acc[gi][mt][2]);
            acc[gi][mt][1] = fmaf(dd[4 * gi + 1] * sw0, sxf[gi][1], acc[gi][mt][1]);
            acc[gi][mt][3] = fmaf(dd[4 * gi + 3] * sw1, sxf[gi][1], acc[gi][mt][3]);
          }
        };
        issue_unit(0);
#pragma unroll
        for (int u = 0; u < kUnits; ++u) {
          if (u + 1 < kUnits) {
            issue_unit(u + 1);
            fp8_sm90::wgmma_wait<1>();
          } else {
            fp8_sm90::wgmma_wait<0>();
          }
          promote_unit(u);
        }
      }
      __syncwarp();
      if (s + kRing - 1 < nstages) {
        issue_w(s + kRing - 1, next_slot);
        issue_x(s + kRing - 1, next_slot);
      }
      cp_async_commit();
      slot = slot == kRing - 1 ? 0 : slot + 1;
      next_slot = next_slot == kRing - 1 ? 0 : next_slot + 1;
    }
  };
  if (kGroups == 1 && tile.count == 1) {
    stage_loop.template operator()<true>();
  } else {
    stage_loop.template operator()<false>();
  }
  cp_async_wait<0>();

  // The two halves' sums: rank 1 hands its accumulators to rank 0 through distributed shared
  // memory (rank 0's weight rings, idle once both have passed the first barrier); rank 0 adds
  // them after its own (fixed order) and stores.
  constexpr int kAcc = kGroups * kMTiles * 4;  // floats per thread
  static_assert(kAcc * kWarps * 32 * 4 <= kWarps * kRing * kStageBytes, "reduction buffer");
  float* red = reinterpret_cast<float*>(smem);
  if constexpr (kSplit == 2) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (rank == 1) {
      float* remote = cluster.map_shared_rank(red, 0);
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi)
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            remote[((gi * kMTiles + mt) * 4 + i) * (kWarps * 32) + threadIdx.x] = acc[gi][mt][i];
    }
    cluster.sync();
    if (rank == 1) return;
  }
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (mt >= mtiles) break;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = 8 * gi + 2 * t4 + (i & 1);
        if (t >= tile.count) continue;
        float v = acc[gi][mt][i];
        if constexpr (kSplit == 2)
          v += red[((gi * kMTiles + mt) * 4 + i) * (kWarps * 32) + threadIdx.x];
        const int64_t col = cta_col0 + 64 * mt + 16 * warp + g + (i >> 1) * 8;
        const int64_t o = (tile.first_pair + t) * out_cols + col;
        if (p.precision == ActPrecision::kF32) {
          ops_detail::store1(static_cast<float*>(p.out) + o, v);
        } else {
          ops_detail::store1(static_cast<uint16_t*>(p.out) + o, v);
        }
      }
    }
  }
}

__global__ void __launch_bounds__(kTilesThreads)
    moe_expert_tiles_kernel(const MoeExpertTilesParams p, int64_t bound) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ typename cub::BlockScan<int32_t, kTilesThreads>::TempStorage scan_tmp;
  __shared__ int32_t total;
  const int e = static_cast<int>(threadIdx.x);
  int32_t count = 0, first = 0;
  if (e < p.experts) {
    first = p.offsets[e];
    count = max(0, p.offsets[e + 1] - first);
  }
  moe_detail::write_expert_tiles<kTilesThreads>(scan_tmp, total, e, first, count, p.tile_tokens,
                                                bound, p.tiles);
}

template <typename S>
__global__ void __launch_bounds__(256) moe_swiglu_quant_kernel(const MoeSwigluQuantParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  using namespace ops_detail;
  const int64_t groups = p.inter / 4;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Whole 8-lane groups are in or out of range (inter % 32 == 0): the shuffles stay converged.
  const bool valid = idx < p.pairs * groups;
  const int64_t pair = valid ? idx / groups : 0;
  const int64_t j = valid ? (idx - pair * groups) * 4 : 0;
  const S* row = static_cast<const S*>(p.gu) + pair * 2 * p.inter;
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (valid) {
    const float4 g4 = load4(row + j), u4 = load4(row + p.inter + j);
    float w = 1.0f;
    if (p.weights != nullptr) w = p.weights[p.pair_index != nullptr ? p.pair_index[pair] : pair];
    const float gs[4] = {g4.x, g4.y, g4.z, g4.w}, us[4] = {u4.x, u4.y, u4.z, u4.w};
    float r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float g = gs[i], u = us[i];
      if (p.limit > 0.0f) {
        u = fminf(fmaxf(u, -p.limit), p.limit);
        g = fminf(g, p.limit);
      }
      const float e = static_cast<float>(exp(static_cast<double>(-g)));
      float h = g / (1.0f + e) * u;
      if (p.weights != nullptr) h = w * h;
      r[i] = h;
    }
    v = make_float4(r[0], r[1], r[2], r[3]);
    if constexpr (sizeof(S) == 2) v = load4_rounded_bf16(v);
  }
  float amax = abs_max4(v);
  for (int off = 4; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if (!valid) return;
  const uint32_t byte = act_scale_byte(amax);
  const float inv = inv_scale_from_byte(byte);
  const float4 q = make_float4(__fmul_rn(v.x, inv), __fmul_rn(v.y, inv), __fmul_rn(v.z, inv),
                               __fmul_rn(v.w, inv));
  const uint32_t codes = e4m3x4(q);
  uint8_t* row_codes = p.codes + pair * p.inter;
  if (p.interleave) {  // elements j .. j + 3: the evens to 2 m, 2 m + 1, the odds to 16 + 2 m ..
    const int64_t blk = j / 32 * 32, m = (j % 32) / 4;
    *reinterpret_cast<uint16_t*>(row_codes + blk + 2 * m) =
        static_cast<uint16_t>(__byte_perm(codes, 0, 0x0020));
    *reinterpret_cast<uint16_t*>(row_codes + blk + 16 + 2 * m) =
        static_cast<uint16_t>(__byte_perm(codes, 0, 0x0031));
  } else {
    *reinterpret_cast<uint32_t*>(row_codes + j) = codes;
  }
  if ((threadIdx.x & 7) == 0) p.scales[pair * (p.inter / 32) + j / 32] = static_cast<uint8_t>(byte);
}

// One thread per 32-block.
__global__ void __launch_bounds__(256) moe_interleave_kernel(const MoeInterleaveParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.rows * (p.k / 32)) return;
  const uint4 a = __ldg(reinterpret_cast<const uint4*>(p.src) + 2 * i);
  const uint4 b = __ldg(reinterpret_cast<const uint4*>(p.src) + 2 * i + 1);
  uint4* dst = reinterpret_cast<uint4*>(p.dst) + 2 * i;
  dst[0] = make_uint4(__byte_perm(a.x, a.y, 0x6420), __byte_perm(a.z, a.w, 0x6420),
                      __byte_perm(b.x, b.y, 0x6420), __byte_perm(b.z, b.w, 0x6420));
  dst[1] = make_uint4(__byte_perm(a.x, a.y, 0x7531), __byte_perm(a.z, a.w, 0x7531),
                      __byte_perm(b.x, b.y, 0x7531), __byte_perm(b.z, b.w, 0x7531));
}

}  // namespace

void moe_interleave_act(const MoeInterleaveParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.k > 0 && p.k % 32 == 0,
           "moe_interleave_act: rows {} k {} (k a positive multiple of 32)", p.rows, p.k);
  if (p.rows == 0) return;
  DI_CHECK(p.src != nullptr && p.dst != nullptr && p.src != p.dst,
           "moe_interleave_act: null or identical src / dst (rows {}, k {})", p.rows, p.k);
  DI_CHECK(
      reinterpret_cast<uintptr_t>(p.src) % 16 == 0 && reinterpret_cast<uintptr_t>(p.dst) % 16 == 0,
      "moe_interleave_act: src and dst must be 16-byte aligned");
  const int64_t blocks = p.rows * (p.k / 32);
  cuda_detail::launch_pdl(moe_interleave_kernel, static_cast<unsigned>((blocks + 255) / 256), 256,
                          0, stream, p);
  DI_CUDA_CHECK(cudaGetLastError());
}

int64_t moe_expert_tile_bound(int32_t experts, int64_t pairs, int32_t tile_tokens) {
  DI_CHECK(experts > 0 && pairs >= 0, "moe_expert_tile_bound: experts {} pairs {}", experts, pairs);
  DI_CHECK(tile_tokens == kMoeTileTokens || tile_tokens == kMoeTileTokensPrefill,
           "moe_expert_tile_bound: tile_tokens {} ({} or {})", tile_tokens, kMoeTileTokens,
           kMoeTileTokensPrefill);
  // sum_e ceil(c_e / t) <= (pairs + (t - 1) * active experts) / t, active <= min(experts, pairs).
  const int64_t active = std::min<int64_t>(experts, pairs);
  return (pairs + (tile_tokens - 1) * active + tile_tokens - 1) / tile_tokens;
}

int32_t moe_expert_tile_tokens(int32_t experts, int64_t pairs) {
  // Prefill tiles once the experts average 32+ pairs (most tiles would be full); either choice
  // gives bitwise the same outputs.
  return pairs >= int64_t{32} * experts ? kMoeTileTokensPrefill : kMoeTileTokens;
}

void moe_expert_tiles(const MoeExpertTilesParams& p, cudaStream_t stream) {
  DI_CHECK(p.experts > 0 && p.experts <= kTilesThreads,
           "moe_expert_tiles: experts {} (1..{} supported)", p.experts, kTilesThreads);
  DI_CHECK(p.pairs >= 0 && p.pairs <= INT32_MAX, "moe_expert_tiles: pairs {}", p.pairs);
  DI_CHECK(p.offsets != nullptr && p.tiles != nullptr, "moe_expert_tiles: null offsets or tiles");
  DI_CHECK(p.tile_tokens == kMoeTileTokens || p.tile_tokens == kMoeTileTokensPrefill,
           "moe_expert_tiles: tile_tokens {} ({} or {})", p.tile_tokens, kMoeTileTokens,
           kMoeTileTokensPrefill);
  const int64_t bound = moe_expert_tile_bound(p.experts, p.pairs, p.tile_tokens);
  if (bound == 0) return;
  cuda_detail::launch_pdl(moe_expert_tiles_kernel, 1, kTilesThreads, 0, stream, p, bound);
  DI_CUDA_CHECK(cudaGetLastError());
}

int moe_expert_cta_mtiles(const MoeExpertGemmParams& p, int sm_count) {
  // w2 at batch 1: 40 slices x 6 tiles = 240 CTAs of two m64 tiles for 4 x 132 slots.
  const bool prefill = p.tile_tokens == kMoeTileTokensPrefill;
  const int64_t ctas = int64_t{k_split(p.k)} * ((p.mats * p.n + 127) / 128) * p.tile_count;
  return !prefill && k_split(p.k) == 1 && ctas < int64_t{4} * sm_count ? 1 : 2;
}

void moe_expert_gemm(const MoeExpertGemmParams& p, cudaStream_t stream) {
  DI_CHECK(p.mats == 1 || p.mats == 2, "moe_expert_gemm: mats {} (1 or 2)", p.mats);
  DI_CHECK(p.n > 0 && p.n % 64 == 0, "moe_expert_gemm: n {} must be a positive multiple of 64",
           p.n);
  DI_CHECK(p.k > 0 && p.k % 32 == 0 && p.k <= kMaxK,
           "moe_expert_gemm: k {} must be a positive multiple of 32, at most {}", p.k, kMaxK);
  DI_CHECK(p.experts > 0 && p.pairs >= 0 && p.pairs <= INT32_MAX,
           "moe_expert_gemm: experts {} pairs {}", p.experts, p.pairs);
  DI_CHECK(p.pair_index == nullptr || p.topk > 0, "moe_expert_gemm: topk {} with pair_index",
           p.topk);
  if (p.pairs == 0) return;
  DI_CHECK(p.xq != nullptr && p.xq_scale != nullptr && p.tiles != nullptr && p.weights != nullptr &&
               p.out != nullptr,
           "moe_expert_gemm: null xq, xq_scale, tiles, weights or out (pairs {}, n {}, k {})",
           p.pairs, p.n, p.k);
  DI_CHECK(reinterpret_cast<uintptr_t>(p.xq) % 16 == 0,
           "moe_expert_gemm: xq must be 16-byte aligned");
  const int64_t bound = moe_expert_tile_bound(p.experts, p.pairs, p.tile_tokens);
  DI_CHECK(p.tile_count >= bound && p.tile_count <= 65535,
           "moe_expert_gemm: tile_count {} (need {} for {} pairs over {} experts in tiles of {}, "
           "<= 65535)",
           p.tile_count, bound, p.pairs, p.experts, p.tile_tokens);
  const bool prefill = p.tile_tokens == kMoeTileTokensPrefill;
  const int split = k_split(p.k);
  const int mtiles = moe_expert_cta_mtiles(p, current_sm_count());
  const int64_t smem = gemm_smem_bytes(p.k, prefill ? kMoeTileTokensPrefill / 8 : 1, split, mtiles);
  constexpr int kPrefillGroups = kMoeTileTokensPrefill / 8;
  auto* kernel = split == 2    ? (prefill ? moe_expert_gemm_kernel<kPrefillGroups, 2, 2>
                                          : moe_expert_gemm_kernel<1, 2, 2>)
                 : prefill     ? moe_expert_gemm_kernel<kPrefillGroups, 1, 2>
                 : mtiles == 1 ? moe_expert_gemm_kernel<1, 1, 1>
                               : moe_expert_gemm_kernel<1, 1, 2>;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t cta_rows = 64 * mtiles;
  const dim3 grid(static_cast<unsigned>(split * ((p.mats * p.n + cta_rows - 1) / cta_rows)),
                  static_cast<unsigned>(p.tile_count));
  cuda_detail::launch_pdl(kernel, grid, kWarps * 32, static_cast<size_t>(smem), stream, p);
  DI_CUDA_CHECK(cudaGetLastError());
}

void moe_swiglu_quant(const MoeSwigluQuantParams& p, cudaStream_t stream) {
  DI_CHECK(p.pairs >= 0 && p.inter > 0 && p.inter % 32 == 0,
           "moe_swiglu_quant: pairs {} inter {} (inter a positive multiple of 32)", p.pairs,
           p.inter);
  if (p.pairs == 0) return;
  DI_CHECK(p.gu != nullptr && p.codes != nullptr && p.scales != nullptr,
           "moe_swiglu_quant: null gu, codes or scales (pairs {}, inter {})", p.pairs, p.inter);
  const int64_t threads = p.pairs * (p.inter / 4);
  const auto blocks = static_cast<unsigned>((threads + 255) / 256);
  if (p.precision == ActPrecision::kF32) {
    cuda_detail::launch_pdl(moe_swiglu_quant_kernel<float>, blocks, 256, 0, stream, p);
  } else {
    cuda_detail::launch_pdl(moe_swiglu_quant_kernel<uint16_t>, blocks, 256, 0, stream, p);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
