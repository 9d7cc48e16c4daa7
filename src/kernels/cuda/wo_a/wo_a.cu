// Grouped low-rank attention output projection wo_a on the GPU (kernels/params/wo_a.h), decode
// regime: the 32 MiB of FP8 weights are streamed once per step (per 16 tokens; per 64 when the
// step has more than 128 rows) through shared memory into bf16 tensor-core MMAs.
//
// Work split (a function of the shape only): a CTA of 8 warps owns 256 consecutive weight rows
// of one group (32 per warp, two m16 tiles), one of wo_a_k_split(gw) K slices (V4.1: 8 slices of
// 512) and 16 tokens (64 above 128 rows); the slices of a row tile form a thread-block cluster
// whose partial sums are added in rank order through distributed shared memory. V4.1 at <= 16 rows:
// 256 CTAs of 128 KiB of weights each, up to 3 per SM (2 per SM: 10 % slower at 8-16 rows). Each
// warp streams its rows through its own 5-stage cp.async ring (32 rows x 32 K-columns = 1 KiB a
// stage: one tile of the tiled weight codes, kernels/params/wo_a.h, the warp's next stage the next
// tile; with the checkpoint's row-major order the stage was 32 pieces of 32 bytes and an L2::128B
// prefetch hint: 25.3 -> 22.6 us at 1 row, bf16). The CTA's activations (16 tokens x its K slice)
// are staged once in shared memory as bf16: bf16 storage as it is, fp32 storage as hi = bf16(x) and
// lo = bf16(x - hi) (hi + lo = x to 2^-16 relative). The weights' first kStages - 1 stages are
// requested before the kernel waits for the launch it follows (under PDL its CTAs are resident
// while the attention runs on a few SMs), the activations after the wait.
//
// Weights: e4m3 -> f16 with the hardware conversion (exact; every e4m3 value is a normal f16 or
// zero), then the f16 bits shifted into bf16 bits (exponent field kept: the bf16 value is the
// weight times 2^-112, a normal bf16) and multiplied (mul.rn.bf16x2) by 2^(S - 15), S the block's
// UE8M0 byte: the result is e4m3 * 2^(S - 127) exactly whenever it and the multiplier are normal
// bf16, i.e. for S in [10, 142] (|e4m3| in [2^-9, 448]; real checkpoints use ~110-130). A block
// with S outside that range takes a slower exact path: the unscaled weights (multiplier 2^112)
// into a partial from zero, then acc = fma(partial, 2^(S - 127), acc) in fp32 (S = 255 gives NaN
// like the reference). NaN weight codes (0x7F / 0xFF) are not propagated (finite garbage).
//
// Tensor cores: mma.sync m16n8k16 bf16 -> fp32 with the weights as A (16 rows) and the tokens as
// B (8 columns): per K step one MMA (bf16 storage) or two, hi then lo (fp32 storage), all into
// the same fp32 accumulators in a fixed order. Inside a 32-column stage lane t of a quad holds
// K columns 8t .. 8t + 7 of its rows and tokens (MMA k-slots 2t, 2t+1, 2t+8, 2t+9 of the two
// K steps), a fixed permutation of the K order that both operands share. A token's outputs
// depend only on its own column of B: rows are bitwise batch-invariant, whatever the number of
// rows or their position in the 16-token chunk.

#include <cooperative_groups.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/sm90_limits.h"
#include "kernels/cuda/wo_a/wo_a.cuh"

namespace di {
namespace {

namespace cg = cooperative_groups;

using cuda_detail::cp_async16;
using cuda_detail::cp_async_commit;
using cuda_detail::cp_async_wait;
using cuda_detail::mma_bf16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMTiles = 2;                        // m16 tiles per warp
constexpr int kWarpRows = 16 * kMTiles;           // 32
constexpr int kCtaRows = kWarps * kWarpRows;      // 256
constexpr int kStageK = 32;                       // K columns (e4m3 bytes) per ring stage
constexpr int kStageBytes = kWarpRows * kStageK;  // 1 KiB per warp and stage
static_assert(kWarpRows == kWoATile && kStageK == kWoATile, "a warp's stage is one weight tile");
constexpr int kStages = 5;  // 40 KiB of rings + 32 KiB of activations (V4.1): 3 CTAs an SM
// Tokens per CTA: 16 (two n8 tiles), or 64 (eight n8 tiles) above kLargeTokensMinRows rows, so
// that a step of many rows streams the weights once per 64 tokens, not per 16. A token's
// arithmetic is the same in both (the same MMA sequence on its own n8 tile, the same cluster
// sum): bitwise equal. H200, V4.1, bf16: 64 rows 64.4 us with 16-token CTAs (1,024 CTAs) vs
// 71.3 with 64-token CTAs (256); 256 rows 227 vs 184 us.
constexpr int kSmallTokens = 16;
constexpr int kLargeTokens = 64;
constexpr int64_t kLargeTokensMinRows = 128;
constexpr int kMaxSplit = 8;
constexpr int64_t kMaxSlice = 1024;       // <= 32 scale columns per slice (one per lane)
constexpr int kRedStride = kCtaRows + 4;  // floats per token of the partial sums (bank spread)
constexpr int kRingRegion = kWarps * kStages * kStageBytes;
constexpr uint32_t kFastScaleMin = 10, kFastScaleMax = 142;
constexpr uint32_t kUnscaled = 0x77807780u;  // bf16x2 {2^112, 2^112}

// Shared memory: the warps' weight rings, then the activations [tokens][slice] bf16 (hi, and lo
// for fp32 storage); the partial sums [tokens][kRedStride] fp32 alias both once they are
// consumed. V4.1 (slices of 512): 72 KiB with 16 tokens (3 CTAs an SM), 104 KiB with 64 bf16
// tokens (2), 168 KiB with 64 fp32 tokens (1).
int64_t smem_bytes(int64_t slice, bool f32, int tokens) {
  const int64_t staged = kRingRegion + (f32 ? 2 : 1) * int64_t{tokens} * slice * 2;
  return std::max<int64_t>(staged, int64_t{tokens} * kRedStride * 4);
}

// Element offset of activation (tok, k) in the staged rows ([tokens][slice], slice % 64 == 0):
// odd tokens swap the 64-byte halves of every 128 bytes, so that the B-fragment loads of tokens
// g and g + 1 fall into different banks.
__device__ __forceinline__ int act_offset(int tok, int k, int slice) {
  return tok * slice + (k ^ ((tok & 1) << 5));
}

// The host-side plan of a launch, passed by value.
struct WoAPlan {
  int split = 1;   // K slices = cluster size
  int slice = 0;   // group_width / split
  int chunks = 0;  // ceil(rows / tokens per CTA)
  int tiles = 0;   // CTA row tiles per group
};

// The e4m3 pair in the low / high 16 bits of w as bf16x2 values times `mult` (see the top).
__device__ __forceinline__ uint32_t weights_lo(uint32_t w, uint32_t mult) {
  uint32_t h, d;
  asm("{\n.reg .b16 l, u;\nmov.b32 {l, u}, %1;\ncvt.rn.f16x2.e4m3x2 %0, l;\n}" : "=r"(h) : "r"(w));
  const uint32_t b = ((h & 0x7FFF7FFFu) >> 3) | (h & 0x80008000u);
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(b), "r"(mult));
  return d;
}
__device__ __forceinline__ uint32_t weights_hi(uint32_t w, uint32_t mult) {
  uint32_t h, d;
  asm("{\n.reg .b16 l, u;\nmov.b32 {l, u}, %1;\ncvt.rn.f16x2.e4m3x2 %0, u;\n}" : "=r"(h) : "r"(w));
  const uint32_t b = ((h & 0x7FFF7FFFu) >> 3) | (h & 0x80008000u);
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(b), "r"(mult));
  return d;
}

// Prefetches `bytes` (a multiple of 16) from global memory at p (16-byte aligned) into L2: one
// bulk-copy-engine request, no registers or shared memory.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// 2^(s - 127) as a float (s = 0: the subnormal 2^-127; s = 255: NaN, like the reference).
__device__ __forceinline__ float e8m0_to_float(uint32_t s) {
  if (s == 255u) return __uint_as_float(0x7FC00000u);
  return s == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
}

// hi = bf16(x), lo = bf16(x - hi) of four activations (x - hi is exact in fp32).
__device__ __forceinline__ void split_hi_lo(float4 v, uint2& hi, uint2& lo) {
  using ops_detail::pack_bf16x2;
  const uint32_t h0 = pack_bf16x2(v.x, v.y), h1 = pack_bf16x2(v.z, v.w);
  const float r0 = __fsub_rn(v.x, __uint_as_float(h0 << 16));
  const float r1 = __fsub_rn(v.y, __uint_as_float(h0 & 0xFFFF0000u));
  const float r2 = __fsub_rn(v.z, __uint_as_float(h1 << 16));
  const float r3 = __fsub_rn(v.w, __uint_as_float(h1 & 0xFFFF0000u));
  hi = make_uint2(h0, h1);
  lo = make_uint2(pack_bf16x2(r0, r1), pack_bf16x2(r2, r3));
}

// CTAs per SM: 3 with 16 tokens, 2 with 64 bf16 tokens, 1 with 64 fp32 tokens (shared memory).
template <bool kF32, int kTokens>
__global__ void __launch_bounds__(kThreads, kTokens == kSmallTokens ? 3 : (kF32 ? 1 : 2))
    wo_a_kernel(const WoAParams p, const WoAPlan plan) {
  constexpr int kNTiles = kTokens / 8;
  // The weights and their scales are never written by earlier launches: the ring's first stages
  // are requested before the wait for the launch this one follows (its attention output, the
  // activations, are read after it), so they stream while that launch finishes.
  extern __shared__ __align__(128) uint8_t smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t cl = static_cast<int64_t>(blockIdx.x) / plan.split;
  const int64_t chunk = cl % plan.chunks;  // chunks of one row tile are neighbours: they share
  const int64_t tile = cl / plan.chunks;   // the weights in L2
  const int64_t group = tile / plan.tiles;
  const int64_t row0 = (tile % plan.tiles) * kCtaRows;  // the CTA's first row in its group
  const int64_t t0 = chunk * kTokens;
  const int tokens = static_cast<int>(min(int64_t{kTokens}, p.rows - t0));
  const int ntiles = (tokens + 7) / 8;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane >> 2, t = lane & 3;
  const int slice = plan.slice, nst = slice / kStageK;
  const int64_t gw = p.group_width, R = p.rank, orow = p.groups * gw;
  const int64_t k0 = int64_t{rank} * slice;       // the CTA's first K column
  const int64_t wrow0 = row0 + warp * kWarpRows;  // the warp's first row in its group
  const int wrows = static_cast<int>(max(int64_t{0}, min(int64_t{kWarpRows}, R - wrow0)));
  uint8_t* ring = smem + warp * (kStages * kStageBytes);
  uint16_t* act_hi = reinterpret_cast<uint16_t*>(smem + kRingRegion);  // [kTokens][slice]
  uint16_t* act_lo = act_hi + kTokens * slice;                         // fp32 storage only

  // Weight copies: lane l brings 16-byte chunk l % 2 of the stage's rows l / 2 + 16 i; the
  // warp's 32 rows of a stage are one 1 KiB tile of the tiled codes, the next stage's the next.
  const uint8_t* wsrc = p.weight + wo_a_code_offset(group * R + wrow0, k0, gw) +
                        (lane >> 1) * kStageK + (lane & 1) * 16;
  uint8_t* wdst = ring + (lane >> 1) * kStageK + (lane & 1) * 16;
  auto issue = [&](int st) {
    uint8_t* dst = wdst + (st % kStages) * kStageBytes;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
      const bool ok = (lane >> 1) + 16 * i < wrows;
      cp_async16(dst + i * 16 * kStageK, ok ? wsrc + i * 16 * kStageK + st * kStageBytes : p.weight,
                 ok);
    }
  };
  // The warp's scale bytes: lane i holds column c0 + i of the row blocks of its rows 0-31 and
  // 32-63 (a stage's 32 columns lie in one column block).
  const int bshift = p.block == 32 ? 5 : 7;
  const int64_t scols = gw >> bshift, c0 = k0 >> bshift;
  const int64_t ncols = ((k0 + slice - 1) >> bshift) - c0 + 1;
  uint32_t sc[2] = {127u, 127u};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (lane < ncols && wrows > 32 * h) {
      sc[h] = p.weight_scale[((group * R + wrow0 + 32 * h) >> bshift) * scols + c0 + lane];
    }
  }

  // Copy groups 0 .. kStages - 2: the first stages (before the wait); group kStages - 1: the bf16
  // activations (after it).
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nst && wrows > 0) issue(s);
    cp_async_commit();
  }
  // A step of at most kSmallTokens rows (one token chunk: each row tile has one reader): the rest
  // of the warp's weights, one contiguous run of tiles, are prefetched into L2 with one bulk
  // prefetch before the wait. They then stream from HBM while the attention this launch follows
  // still runs on a few SMs, and the ring reads them from L2 (32 MiB at V4.1, inside the 50 MiB
  // L2). Larger steps skip it: their attention reads enough KV to evict the weights again.
  if (p.rows <= kSmallTokens && lane == 0 && wrows > 0 && nst > kStages - 1) {
    prefetch_l2_bulk(
        p.weight + wo_a_code_offset(group * R + wrow0, k0, gw) + (kStages - 1) * kStageBytes,
        static_cast<uint32_t>((nst - (kStages - 1)) * kStageBytes));
  }
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  if constexpr (!kF32) {
    const uint16_t* x = static_cast<const uint16_t*>(p.o) + t0 * orow + group * gw + k0;
    const int q = slice / 8;  // 16-byte pieces per token
    for (int u = static_cast<int>(threadIdx.x); u < kTokens * q; u += kThreads) {
      const int tok = u / q, kq = u - tok * q;
      const bool ok = tok < tokens;
      cp_async16(act_hi + act_offset(tok, 8 * kq, slice), ok ? x + tok * orow + 8 * kq : p.o, ok);
    }
  }
  cp_async_commit();
  if constexpr (kF32) {  // loads in batches of 4 per thread, then the hi / lo split
    const float* x = static_cast<const float*>(p.o) + t0 * orow + group * gw + k0;
    const int q = slice / 4, units = kTokens * q;
    for (int u0 = static_cast<int>(threadIdx.x); u0 < units; u0 += 4 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int u = u0 + j * kThreads, tok = u / q;
        v[j] = u < units && tok < tokens
                   ? __ldg(reinterpret_cast<const float4*>(x + tok * orow) + (u - tok * q))
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int u = u0 + j * kThreads, tok = u / q;
        if (u >= units) break;
        uint2 hi, lo;
        split_hi_lo(v[j], hi, lo);
        const int e = act_offset(tok, 4 * (u - tok * q), slice);
        *reinterpret_cast<uint2*>(act_hi + e) = hi;
        *reinterpret_cast<uint2*>(act_lo + e) = lo;
      }
    }
  }
  // Every group so far (the activations last) has landed for every thread. In the stage loop,
  // iteration st has kStages + st groups committed and waits for all but kStages - 2: stage st
  // is group st (st < kStages - 1) or st + 1 (issued at iteration st - kStages + 1).
  cp_async_wait<0>();
  __syncthreads();

  float acc[kMTiles][kNTiles][4] = {};
  // Every scale block of the warp's rows in this slice inside the fast range (warp vote; lanes
  // past the slice's columns hold the neutral 127).
  const bool all_fast =
      __all_sync(0xFFFFFFFFu, sc[0] >= kFastScaleMin && sc[0] <= kFastScaleMax &&
                                  sc[1] >= kFastScaleMin && sc[1] <= kFastScaleMax);
  // The stage loop; kAllFast: no block takes the exact slow path (every real checkpoint), kNT > 0:
  // that many n8 tiles of tokens, known at compile time. (R % 32 == 0, so a warp with rows has
  // both of its m16 tiles.)
  auto stage_loop = [&]<bool kAllFast, int kNT>() {
    const uint16_t* bh = act_hi + g * slice + 8 * t;  // + act_offset's swap: st ^ (g & 1)
    [[maybe_unused]] const uint16_t* bl = act_lo + g * slice + 8 * t;  // fp32 storage
    for (int st = 0; st < nst; ++st) {
      cp_async_wait<kStages - 2>();
      __syncwarp();  // every lane's copies of stage st landed; every lane is done with st - 1
      if (st + kStages - 1 < nst) issue(st + kStages - 1);
      cp_async_commit();
      const uint8_t* slot = ring + (st % kStages) * kStageBytes;
      // The weights of the stage as bf16 A fragments, per m16 tile and K step: scaled by the
      // block's 2^(S - 127) when that stays exact in bf16, else unscaled (the scale is applied to
      // the fp32 partial below).
      const int col = static_cast<int>(((k0 + st * kStageK) >> bshift) - c0);
      const uint32_t s_lo = __shfl_sync(0xFFFFFFFFu, sc[0], col);  // warp-uniform
      const uint32_t s_hi = __shfl_sync(0xFFFFFFFFu, sc[1], col);
      uint32_t a[kMTiles][2][4];
      bool fast[kMTiles];
      float sf[kMTiles];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        // Rows g and g + 8 of the tile: K columns 8t .. 8t + 7 (one word per K step).
        const uint2 wg = *reinterpret_cast<const uint2*>(slot + (mt * 16 + g) * kStageK + 8 * t);
        const uint2 wg8 =
            *reinterpret_cast<const uint2*>(slot + (mt * 16 + g + 8) * kStageK + 8 * t);
        const uint32_t s = mt < 2 ? s_lo : s_hi;
        fast[mt] = kAllFast || (s >= kFastScaleMin && s <= kFastScaleMax);
        sf[mt] = e8m0_to_float(s);
        // bf16x2 {2^(s-15), 2^(s-15)} (fast), or {2^112, 2^112}
        const uint32_t mult = fast[mt] ? ((s + 112u) << 7) * 0x10001u : kUnscaled;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          const uint32_t w0 = ks == 0 ? wg.x : wg.y, w1 = ks == 0 ? wg8.x : wg8.y;
          a[mt][ks][0] = weights_lo(w0, mult);
          a[mt][ks][1] = weights_lo(w1, mult);
          a[mt][ks][2] = weights_hi(w0, mult);
          a[mt][ks][3] = weights_hi(w1, mult);
        }
      }
      // Per n8 tile: its B fragments (K columns 8t .. 8t + 7 of the stage for token g), then
      // every m16 tile's K steps 0, 1 (hi, then lo for fp32 storage) into its accumulators; a
      // block outside the fast range goes through a partial from zero and one fp32 fma.
      const int boff = kStageK * (st ^ (g & 1));
#pragma unroll
      for (int nt = 0; nt < (kNT > 0 ? kNT : kNTiles); ++nt) {
        if (kNT == 0 && nt >= ntiles) break;
        const uint4 bhi = *reinterpret_cast<const uint4*>(bh + nt * 8 * slice + boff);
        uint4 blo = make_uint4(0u, 0u, 0u, 0u);
        if constexpr (kF32) blo = *reinterpret_cast<const uint4*>(bl + nt * 8 * slice + boff);
        if constexpr (kAllFast) {
          // K step outer, m16 tile inner: consecutive MMAs into different accumulators (each
          // accumulator still takes ks 0 then 1, hi then lo: the same sums).
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              mma_bf16(acc[mt][nt], a[mt][ks], ks == 0 ? bhi.x : bhi.z, ks == 0 ? bhi.y : bhi.w);
              if constexpr (kF32) {
                mma_bf16(acc[mt][nt], a[mt][ks], ks == 0 ? blo.x : blo.z, ks == 0 ? blo.y : blo.w);
              }
            }
          }
        } else {
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            const auto k_steps = [&](float(&d)[4]) {
#pragma unroll
              for (int ks = 0; ks < 2; ++ks) {
                mma_bf16(d, a[mt][ks], ks == 0 ? bhi.x : bhi.z, ks == 0 ? bhi.y : bhi.w);
                if constexpr (kF32) {
                  mma_bf16(d, a[mt][ks], ks == 0 ? blo.x : blo.z, ks == 0 ? blo.y : blo.w);
                }
              }
            };
            if (fast[mt]) {  // warp-uniform
              k_steps(acc[mt][nt]);
            } else {
              float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              k_steps(part);
#pragma unroll
              for (int i = 0; i < 4; ++i)
                acc[mt][nt][i] = fmaf(part[i], sf[mt], acc[mt][nt][i]);
            }
          }
        }
      }
    }
  };
  if (wrows > 0) {
    if (!all_fast) {
      stage_loop.template operator()<false, 0>();
    } else if constexpr (kTokens == kSmallTokens) {
      if (ntiles == 1) {
        stage_loop.template operator()<true, 1>();
      } else {
        stage_loop.template operator()<true, kNTiles>();
      }
    } else {
      stage_loop.template operator()<true, 0>();
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the region takes the partial sums

  // The slices' sums: every CTA publishes its partials [token][row]; rank q adds rows
  // [q * rows_per_rank, (q + 1) * rows_per_rank) of all slices in rank order and stores them.
  float* red = reinterpret_cast<float*>(smem);
  if (wrows > 0) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = warp * kWarpRows + mt * 16 + g + (i >> 1) * 8;
          red[(nt * 8 + 2 * t + (i & 1)) * kRedStride + row] = acc[mt][nt][i];
        }
  }
  cluster.sync();
  const float* parts[kMaxSplit];
#pragma unroll
  for (int q = 0; q < kMaxSplit; ++q)
    parts[q] = q < plan.split ? cluster.map_shared_rank(red, q) : red;
  const int rpr = kCtaRows / plan.split;
  const int64_t zrow = p.groups * R;
  for (int i = static_cast<int>(threadIdx.x); i < rpr * tokens; i += kThreads) {
    const int tok = i / rpr, r = rank * rpr + (i - tok * rpr);
    if (row0 + r >= R) continue;
    const int e = tok * kRedStride + r;
    float v = parts[0][e];
#pragma unroll
    for (int q = 1; q < kMaxSplit; ++q)
      if (q < plan.split) v += parts[q][e];
    const int64_t o = (t0 + tok) * zrow + group * R + row0 + r;
    float stored = v;  // z's value as stored
    if constexpr (kF32) {
      ops_detail::store1(static_cast<float*>(p.z) + o, v);
    } else {
      const uint32_t bits = ops_detail::pack_bf16x2(v, 0.0f) & 0xFFFFu;
      static_cast<uint16_t*>(p.z)[o] = static_cast<uint16_t>(bits);
      stored = __uint_as_float(bits << 16);
    }
    if (p.z_codes != nullptr) {
      // rpr == 32 (wo_a_fuses_act_quant): this warp's 32 lanes hold one token's 32-column block
      // (i = 32 w + lane + 256 j: tok uniform, r = lane; the skip above is warp-uniform). The
      // standalone act_quant's steps on the same stored values.
      float amax = fabsf(stored);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
      const uint32_t byte = ops_detail::act_scale_byte(amax);
      const float q = __fmul_rn(stored, ops_detail::inv_scale_from_byte(byte));
      p.z_codes[o] = static_cast<uint8_t>(ops_detail::e4m3x4(make_float4(q, q, q, q)) & 0xFFu);
      if ((threadIdx.x & 31) == 0) p.z_scales[o / 32] = static_cast<uint8_t>(byte);
    }
  }
  cluster.sync();  // no CTA leaves while the others still read its partial sums
}

}  // namespace

int wo_a_k_split(int64_t group_width) {
  DI_CHECK(group_width > 0, "wo_a_k_split: group_width {}", group_width);
  // Halve the slices while they stay multiples of 64 and longer than 512 columns: 8 for 4096.
  int split = 1;
  while (split < kMaxSplit && group_width % (int64_t{128} * split) == 0 &&
         group_width / split > 512)
    split *= 2;
  return split;
}

bool wo_a_fuses_act_quant(const WoAParams& p) {
  return p.group_width > 0 && kCtaRows / wo_a_k_split(p.group_width) == 32 && p.rank % 32 == 0;
}

void wo_a(const WoAParams& p, cudaStream_t stream) {
  DI_CHECK(p.precision == ActPrecision::kF32 || p.precision == ActPrecision::kBF16,
           "wo_a: precision {} (fp32 or bf16)", static_cast<int>(p.precision));
  DI_CHECK(p.block == 32 || p.block == 128, "wo_a: block {} (32 or 128)", p.block);
  DI_CHECK(p.rows >= 0 && p.groups > 0 && p.rank > 0,
           "wo_a: rows {} groups {} rank {} (positive groups and rank)", p.rows, p.groups, p.rank);
  // Every group starts on a scale block (cpu::WeightRef::slice_rows requires it too): a warp's
  // rows 0-31 and 32-63 each lie in one row block.
  DI_CHECK(p.rank % p.block == 0, "wo_a: rank {} must be a multiple of block {}", p.rank, p.block);
  DI_CHECK(p.group_width > 0 && p.group_width % 64 == 0 && p.group_width % p.block == 0,
           "wo_a: group_width {} must be a positive multiple of 64 and of block {}", p.group_width,
           p.block);
  DI_CHECK(p.groups <= (int64_t{1} << 20) && p.rank <= (int64_t{1} << 20),
           "wo_a: groups {} rank {} too large", p.groups, p.rank);
  const int split = wo_a_k_split(p.group_width);
  const int64_t slice = p.group_width / split;
  DI_CHECK(slice <= kMaxSlice,
           "wo_a: group_width {} gives K slices of {} columns (at most {}: group_width a multiple "
           "of 512 up to 8192, or at most 1024)",
           p.group_width, slice, kMaxSlice);
  const bool f32 = p.precision == ActPrecision::kF32;
  const bool large_fits = smem_bytes(slice, f32, kLargeTokens) <= cuda_detail::kSm90MaxSmemPerBlock;
  const int tok_per_cta = p.rows > kLargeTokensMinRows && large_fits ? kLargeTokens : kSmallTokens;
  const int64_t chunks = (p.rows + tok_per_cta - 1) / tok_per_cta;
  const int64_t tiles = (p.rank + kCtaRows - 1) / kCtaRows;
  const int64_t ctas = split * chunks * p.groups * tiles;
  DI_CHECK(ctas <= INT32_MAX, "wo_a: rows {} groups {} rank {} need {} CTAs (more than a grid)",
           p.rows, p.groups, p.rank, ctas);
  DI_CHECK((p.z_codes == nullptr) == (p.z_scales == nullptr),
           "wo_a: z_codes and z_scales go together (rows {})", p.rows);
  DI_CHECK(p.z_codes == nullptr || wo_a_fuses_act_quant(p),
           "wo_a: act_quant of z needs 32-row cluster ranks (group_width {} splits {} ways, rank "
           "{})",
           p.group_width, split, p.rank);
  if (p.rows == 0) return;
  DI_CHECK(p.o != nullptr && p.weight != nullptr && p.weight_scale != nullptr && p.z != nullptr,
           "wo_a: null o, weight, weight_scale or z (rows {}, groups {}, rank {}, group_width {})",
           p.rows, p.groups, p.rank, p.group_width);
  DI_CHECK(
      reinterpret_cast<uintptr_t>(p.o) % 16 == 0 && reinterpret_cast<uintptr_t>(p.weight) % 16 == 0,
      "wo_a: o and weight must be 16-byte aligned");
  DI_CHECK(reinterpret_cast<uintptr_t>(p.z) % (f32 ? 4 : 2) == 0,
           "wo_a: z must be aligned to its {}-byte elements", f32 ? 4 : 2);

  WoAPlan plan;
  plan.split = split;
  plan.slice = static_cast<int>(slice);
  plan.chunks = static_cast<int>(chunks);
  plan.tiles = static_cast<int>(tiles);
  const int64_t smem = smem_bytes(slice, f32, tok_per_cta);
  using Kernel = void (*)(WoAParams, WoAPlan);
  const bool large = tok_per_cta == kLargeTokens;
  const Kernel kernel =
      f32 ? (large ? wo_a_kernel<true, kLargeTokens> : wo_a_kernel<true, kSmallTokens>)
          : (large ? wo_a_kernel<false, kLargeTokens> : wo_a_kernel<false, kSmallTokens>);
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas), 1, 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(split);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1] = cuda_detail::pdl_attribute();  // the kernel waits first (kernels/cuda/pdl.cuh)
  config.attrs = attr;
  config.numAttrs = 2;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p, plan));
}

}  // namespace di
