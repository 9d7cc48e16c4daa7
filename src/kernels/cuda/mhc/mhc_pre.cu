// Pre side of the fused single-pass mHC (delta spec §5.3): for every token row of the stream
// X [T, 4, D], the 24 mixes m = (fn . flatten(X)) * rsqrt(mean(X^2) + eps) with the sigmoid /
// Sinkhorn epilogue, and the collapse sum_j carried_pre[j] * X_j. The collapse uses the carried
// pre of the PREVIOUS site, known before X is read, so mixes and collapse share one read of X.
//
// Pass 1 (mhc_pre_partial_kernel), a persistent grid (as many CTAs as are resident) over the work
// items (D-split, token tile), split-major, each CTA a contiguous range. A CTA streams its items'
// slices of X (all 4 copies, kChunk d at a time, with the rows' carried pre) through one cp.async
// pipeline into shared memory that runs on across item boundaries.
// Warp w owns d-block w (16 d) of each chunk and, from registers:
//  - the 24 dot products on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate): rows =
//    tokens, k = d, n = mixes. fn is split into three bf16 pieces (f = f0 + f1 + f2 exactly for
//    normal values), so every product with a bf16 X is exact; fp32 X is split the same way and
//    the six products above 2^-24 relative are kept. The result is fp32 accurate (reduction-order
//    differences only), not tf32/bf16 accurate.
//  - the sum of squares and the collapse of the same fragment values (each lane holds the same
//    (token, d) positions of all 4 copies), written straight to `collapsed`.
// Partial sums go to the workspace, one slot per (split, token); the warps of a CTA and the
// splits are combined in a fixed order, so a row's result never depends on T or on its tile.
// Pass 2 (mhc_pre_finalize_kernel): 16 lanes per token (one per comb entry) sum the splits in
// order and run the sigmoid / softmax / Sinkhorn epilogue exactly as cpu::hc_mixes (row and column
// sums gathered by shuffles and added in the CPU's order).

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/mhc/mhc.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/sm90_limits.h"

namespace di {
namespace {

namespace cg = cooperative_groups;

using cuda_detail::Bf16Pieces;
using cuda_detail::bf16x2_bits;
using cuda_detail::cp_async16;
using cuda_detail::cp_async4;
using cuda_detail::cp_async_commit;
using cuda_detail::cp_async_wait;
using cuda_detail::mma_bf16;
using cuda_detail::split3_bf16;

constexpr int kThreads = 128;      // 4 warps, one per 16-d block of a chunk
constexpr int kChunk = 64;         // d per pipeline stage (all 4 copies)
constexpr int kDefaultStages = 2;  // measured faster at T >= 4096 (docs/design/cuda_mhc.md)
constexpr MhcPreGrid kDefaultGrid = MhcPreGrid::kPersistent;
constexpr int kPartials = kMhcMixes + 1;  // 24 dot products + the sum of squares

// Tile shapes per storage. A stage is kRows token rows x 4 copies x kChunk d; each row is padded
// so that the A-fragment loads (8 rows x 4 lanes) hit 32 different banks: a row stride of 4 (bf16,
// 4-byte loads) or 8 (fp32, 8-byte loads) words modulo 32.
template <MhcStorage S>
struct TileCfg;
template <>
struct TileCfg<MhcStorage::kBf16> {
  using Elem = uint16_t;
  static constexpr int kRows = 64;
  static constexpr int kRowBytes = kMhcStreams * kChunk * 2 + 16;
};
template <>
struct TileCfg<MhcStorage::kF32> {
  using Elem = float;
  static constexpr int kRows = 32;  // fp32 rows are twice the bytes: same stage size
  static constexpr int kRowBytes = kMhcStreams * kChunk * 4 + 32;
};

// Shapes of one instantiation. Large tiles (kSmall = false) keep fn in global memory (read through
// the L1 once per 16-k block and copy, one copy ahead): at T >= a few hundred the same fragments
// serve 32-64 rows. Small tiles (kSmall = true: 16 rows) are the decode shape: a split has only
// a handful of tiles, so a CTA's fn fragments (36 KiB per chunk) are part of its cp.async stage
// and arrive with the X rows, several chunks in flight, instead of one dependent load chain per
// copy. Both compute every row with the same instruction sequence: bitwise the same outputs.
template <MhcStorage S, bool kSmall>
struct Tile {
  static constexpr int kRows = kSmall ? 16 : TileCfg<S>::kRows;
  static constexpr int kRowBytes = TileCfg<S>::kRowBytes;
  static constexpr int kStageX = kRows * kRowBytes;
  static constexpr int kPreBytes = kRows * kMhcStreams * 4;
  static constexpr int kFnBlockWords = 576;  // one 16-k block of the packed fn
  // Per chunk: 4 copies x 4 warps (16-d blocks) of fn blocks, [copy][warp][576 words].
  static constexpr int kFnBytes = kSmall ? kMhcStreams * (kChunk / 16) * kFnBlockWords * 4 : 0;
  // A stage: kRows padded rows of X, the rows' carried pre [kRows][4] fp32, then (small) fn.
  static constexpr int kStage = kStageX + kPreBytes + kFnBytes;
};

// Stages, then the warp-combine buffer [kRows][kPartials].
template <MhcStorage S, bool kSmall, int kStages>
constexpr int smem_bytes() {
  return kStages * Tile<S, kSmall>::kStage + Tile<S, kSmall>::kRows * kPartials * 4;
}

__device__ __forceinline__ float bf16_lo(uint32_t w) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t w) {
  return __uint_as_float(w & 0xFFFF0000u);
}

// The MMA A fragment of rows g (row_lo) and g + 8 (row_hi), columns 2q, 2q + 1 and 2q + 8, 2q + 9
// of a 16-d block: the bf16 pairs in a (bf16 storage only) and the values in v: v[0..1] (g, 2q..),
// v[2..3] (g + 8, 2q..), v[4..5] (g, 2q + 8..), v[6..7] (g + 8, 2q + 8..).
template <MhcStorage S>
__device__ __forceinline__ void load_a_frag(const unsigned char* row_lo,
                                            const unsigned char* row_hi, int q, uint32_t (&a)[4],
                                            float (&v)[8]) {
  if constexpr (S == MhcStorage::kBf16) {
    a[0] = *reinterpret_cast<const uint32_t*>(row_lo + 4 * q);
    a[1] = *reinterpret_cast<const uint32_t*>(row_hi + 4 * q);
    a[2] = *reinterpret_cast<const uint32_t*>(row_lo + 16 + 4 * q);
    a[3] = *reinterpret_cast<const uint32_t*>(row_hi + 16 + 4 * q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = bf16_lo(a[i]);
      v[2 * i + 1] = bf16_hi(a[i]);
    }
  } else {
    const float2 f0 = *reinterpret_cast<const float2*>(row_lo + 8 * q);
    const float2 f1 = *reinterpret_cast<const float2*>(row_hi + 8 * q);
    const float2 f2 = *reinterpret_cast<const float2*>(row_lo + 32 + 8 * q);
    const float2 f3 = *reinterpret_cast<const float2*>(row_hi + 32 + 8 * q);
    v[0] = f0.x, v[1] = f0.y, v[2] = f1.x, v[3] = f1.y;
    v[4] = f2.x, v[5] = f2.y, v[6] = f3.x, v[7] = f3.y;
  }
}

// The 24-mix MMAs of one 16-k block for kN n-tiles (accumulators acc[n]): bf16 storage one
// product per fn piece, smallest piece first; fp32 storage the six piece products of the split X
// above 2^-24 relative, small terms first. n is the inner loop: the same per-accumulator order
// for every kN.
template <MhcStorage S, int kN>
__device__ __forceinline__ void mix_mmas(float (&acc)[kN][4], const uint32_t (&a)[4],
                                         const float (&v)[8], const Bf16Pieces (&bp)[kN][2]) {
  if constexpr (S == MhcStorage::kBf16) {
#pragma unroll
    for (int pb = 2; pb >= 0; --pb) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
        mma_bf16(acc[n], a, bp[n][0].w[pb], bp[n][1].w[pb]);
    }
  } else {
    const Bf16Pieces ap[4] = {split3_bf16(v[0], v[1]), split3_bf16(v[2], v[3]),
                              split3_bf16(v[4], v[5]), split3_bf16(v[6], v[7])};
    constexpr int kPa[6] = {2, 1, 0, 1, 0, 0};
    constexpr int kPb[6] = {0, 1, 2, 0, 1, 0};
#pragma unroll
    for (int t = 0; t < 6; ++t) {
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        const uint32_t at[4] = {ap[0].w[kPa[t]], ap[1].w[kPa[t]], ap[2].w[kPa[t]], ap[3].w[kPa[t]]};
        mma_bf16(acc[n], at, bp[n][0].w[kPb[t]], bp[n][1].w[kPb[t]]);
      }
    }
  }
}

// Large tiles: kStages = 3: 2 CTAs per SM; kStages = 2: 3 CTAs per SM (register cap 170).
template <MhcStorage S, bool kSmall, int kStages>
__global__ void __launch_bounds__(kThreads, kSmall ? 1 : (kStages == 2 ? 3 : 2))
    mhc_pre_partial_kernel(MhcPreParams p, int splits, int chunks_per_split, int64_t tiles) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  using T = Tile<S, kSmall>;
  using Elem = typename TileCfg<S>::Elem;
  constexpr int kRows = T::kRows;
  constexpr int kMt = kRows / 16;  // m-tiles per warp
  constexpr int kRowBytes = T::kRowBytes;
  constexpr int kStage = T::kStage;
  constexpr int kStageX = T::kStageX;
  constexpr int kSegPieces = kChunk * static_cast<int>(sizeof(Elem)) / 16;  // 16 B per cp.async
  constexpr int kPieces = kRows * kMhcStreams * kSegPieces;

  extern __shared__ __align__(16) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem + kStages * kStage);  // [kRows][kPartials]

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int64_t tokens = p.tokens, dim = p.dim;
  const Elem* x = static_cast<const Elem*>(p.stream);

  // This CTA's contiguous range of items (split-major: item = split * tiles + tile). Positions
  // are walked with cursors (no per-step division).
  const int64_t items = tiles * splits;
  const int64_t item_begin = items * blockIdx.x / gridDim.x;
  const int64_t item_end = items * (blockIdx.x + 1) / gridDim.x;
  const int cps = chunks_per_split;
  const int nsteps = static_cast<int>((item_end - item_begin) * cps);

  struct Step {
    int64_t t0, d0;
    int rows, split, c;
  };
  struct Cursor {
    int tile, split, c;
  };
  const Cursor start{static_cast<int>(item_begin % tiles), static_cast<int>(item_begin / tiles), 0};
  auto advance = [&](Cursor& cur) {
    if (++cur.c == cps) {
      cur.c = 0;
      if (++cur.tile == tiles) {
        cur.tile = 0;
        ++cur.split;
      }
    }
  };
  auto step_of = [&](const Cursor& cur) {
    Step st;
    st.c = cur.c;
    st.split = cur.split;
    st.t0 = static_cast<int64_t>(cur.tile) * kRows;
    st.rows = static_cast<int>(tokens - st.t0 < kRows ? tokens - st.t0 : kRows);
    st.d0 = (static_cast<int64_t>(st.split) * cps + st.c) * kChunk;
    return st;
  };
  Cursor lcur = start, ccur = start;  // next load, next compute

  // The load loop's per-thread constants: each row of a stage is kPerRow 16-byte pieces (4
  // copies x kSegPieces) and the CTA's threads cover kRowStep whole rows per pass.
  constexpr int kPerRow = kMhcStreams * kSegPieces;
  static_assert(kThreads % kPerRow == 0 && kPieces % kThreads == 0, "load tiling");
  constexpr int kRowStep = kThreads / kPerRow;
  const int ld_r0 = tid / kPerRow;
  const int ld_j = (tid % kPerRow) / kSegPieces;
  const int ld_sg = tid % kSegPieces;

  auto load_stage = [&](int buf) {
    const Step st = step_of(lcur);
    advance(lcur);
    unsigned char* dst = smem + buf * kStage;
    // Thread tid copies the 16-byte piece (copy j, segment sg) of rows r0, r0 + kRowStep, ...
    const Elem* src = x + ((st.t0 + ld_r0) * kMhcStreams + ld_j) * dim + st.d0 +
                      ld_sg * static_cast<int>(16 / sizeof(Elem));
    unsigned char* d =
        dst + ld_r0 * kRowBytes + ld_j * kChunk * static_cast<int>(sizeof(Elem)) + ld_sg * 16;
#pragma unroll
    for (int k = 0; k < kPieces / kThreads; ++k) {
      const bool valid = ld_r0 + k * kRowStep < st.rows;
      cp_async16(d + k * kRowStep * kRowBytes,
                 valid ? src + static_cast<int64_t>(k) * kRowStep * kMhcStreams * dim : x, valid);
    }
    float* pre_dst = reinterpret_cast<float*>(dst + kStageX);
    for (int i = tid; i < kRows * kMhcStreams; i += kThreads) {
      const bool valid = i / kMhcStreams < st.rows;
      cp_async4(pre_dst + i, valid ? p.carried_pre + st.t0 * kMhcStreams + i : p.carried_pre,
                valid);
    }
    if constexpr (kSmall) {
      // The chunk's fn blocks, [copy j][warp w] = 16-k block j * dim / 16 + d0 / 16 + w: each
      // (j) a contiguous run of kChunk / 16 blocks in the packed fn.
      constexpr int kRun = (kChunk / 16) * T::kFnBlockWords / 4;  // 16-byte pieces per copy
      unsigned char* fn_dst = dst + kStageX + T::kPreBytes;
      for (int i = tid; i < kMhcStreams * kRun; i += kThreads) {
        const int j = i / kRun, piece = i % kRun;
        const uint32_t* src_fn =
            p.fn_packed + (j * (dim / 16) + st.d0 / 16) * T::kFnBlockWords + piece * 4;
        cp_async16(fn_dst + static_cast<size_t>(i) * 16, src_fn, true);
      }
    }
  };

  float acc[kMt][3][4] = {};
  float ss[kMt][2] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nsteps) load_stage(s);
    cp_async_commit();
  }

  const int64_t kblocks_per_copy = dim / 16;
  const uint32_t* fnw = p.fn_packed;  // 576 words per 16 k (mhc_pack_fn)
  Elem* out = static_cast<Elem*>(p.collapsed);

  for (int step = 0, cbuf = 0, lbuf = kStages - 1; step < nsteps; ++step) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (step + kStages - 1 < nsteps) load_stage(lbuf);
    cp_async_commit();
    lbuf = lbuf + 1 == kStages ? 0 : lbuf + 1;
    const Step st = step_of(ccur);
    advance(ccur);
    const int rows = st.rows;
    const int64_t t0 = st.t0, d0 = st.d0;
    const unsigned char* buf = smem + cbuf * kStage;
    cbuf = cbuf + 1 == kStages ? 0 : cbuf + 1;
    const float* pre_s = reinterpret_cast<const float*>(buf + kStageX);
    const int64_t kb0 = d0 / 16 + warp;  // this warp's k16 block within copy 0

    if (st.c == 0) {
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        ss[mt][0] = ss[mt][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < 3; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc[mt][n][e] = 0.0f;
        }
      }
    }

    float col[kMt][8];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        col[mt][e] = 0.0f;
    }

    // This lane's 18 B-fragment words of a 16-k block: piece p of pair (n, h) in word 6p + 2n + h.
    struct FnWords {
      uint4 c[4];
      uint2 t;
    };
    // Copy j's block of this warp: from global memory (large tiles) or from the stage (small).
    const auto load_fn = [&](int j) {
      FnWords f;
      if constexpr (kSmall) {
        const uint32_t* blk = reinterpret_cast<const uint32_t*>(buf + kStageX + T::kPreBytes) +
                              (j * (kChunk / 16) + warp) * T::kFnBlockWords;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          f.c[i] = reinterpret_cast<const uint4*>(blk + i * 128)[lane];
        f.t = reinterpret_cast<const uint2*>(blk + 512)[lane];
      } else {
        const uint32_t* blk = fnw + (j * kblocks_per_copy + kb0) * T::kFnBlockWords;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          f.c[i] = __ldg(reinterpret_cast<const uint4*>(blk + i * 128) + lane);
        f.t = __ldg(reinterpret_cast<const uint2*>(blk + 512) + lane);
      }
      return f;
    };
    FnWords fb_next = load_fn(0);

#pragma unroll
    for (int j = 0; j < kMhcStreams; ++j) {
      const FnWords fb = fb_next;
      if (j + 1 < kMhcStreams) fb_next = load_fn(j + 1);
      const uint32_t fw[18] = {fb.c[0].x, fb.c[0].y, fb.c[0].z, fb.c[0].w, fb.c[1].x, fb.c[1].y,
                               fb.c[1].z, fb.c[1].w, fb.c[2].x, fb.c[2].y, fb.c[2].z, fb.c[2].w,
                               fb.c[3].x, fb.c[3].y, fb.c[3].z, fb.c[3].w, fb.t.x,    fb.t.y};
      Bf16Pieces bp[3][2];
#pragma unroll
      for (int n = 0; n < 3; ++n) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int pc = 0; pc < 3; ++pc)
            bp[n][h].w[pc] = fw[6 * pc + 2 * n + h];
        }
      }

#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        // An m-tile with no valid row is skipped (warp-uniform); MMA rows are independent, so
        // the valid rows' results are the same either way.
        if (mt * 16 >= rows) continue;
        const int r_lo = mt * 16 + g;
        const unsigned char* row_lo =
            buf + r_lo * kRowBytes + (j * kChunk + warp * 16) * static_cast<int>(sizeof(Elem));
        const unsigned char* row_hi = row_lo + 8 * kRowBytes;
        float v[8];
        uint32_t a[4];
        load_a_frag<S>(row_lo, row_hi, q, a, v);
        // Collapse (CPU order: acc = 0; acc += pre_j * x_j, j ascending) and sum of squares.
        const float p_lo = pre_s[r_lo * kMhcStreams + j];
        const float p_hi = pre_s[(r_lo + 8) * kMhcStreams + j];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float pj = (i & 2) ? p_hi : p_lo;
          col[mt][i] = __fadd_rn(col[mt][i], __fmul_rn(pj, v[i]));
          ss[mt][(i >> 1) & 1] = __fmaf_rn(v[i], v[i], ss[mt][(i >> 1) & 1]);
        }
        // The 24 dot products; small terms first.
        mix_mmas<S, 3>(acc[mt], a, v, bp);
      }
    }

    // Collapsed outputs of this warp's 16 d for its rows.
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + g + 8 * half;
        if (r >= rows) continue;
        Elem* o = out + (t0 + r) * dim + d0 + warp * 16 + 2 * q;
#pragma unroll
        for (int cs = 0; cs < 2; ++cs) {  // columns 2q.. and 2q+8..
          const float lo = col[mt][cs * 4 + half * 2], hi = col[mt][cs * 4 + half * 2 + 1];
          if constexpr (S == MhcStorage::kBf16) {
            *reinterpret_cast<uint32_t*>(o + cs * 8) = bf16x2_bits(__floats2bfloat162_rn(lo, hi));
          } else {
            *reinterpret_cast<float2*>(o + cs * 8) = make_float2(lo, hi);
          }
        }
      }
    }

    if (st.c != cps - 1) continue;
      // End of an item: combine the 4 warps (d-blocks) in warp order, ((w0 + w1) + w2) + w3,
      // through red[row][25]; warp 3 writes the item's partials to the workspace. The next write
      // of red (warp 0, next item) comes after at least one more top-of-step barrier.
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v = ss[mt][half];
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
        ss[mt][half] = v;
      }
    }
    float* ws = p.workspace + (static_cast<int64_t>(st.split) * tokens + t0) * kPartials;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) {
      if (warp == w) {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          if (mt * 16 >= rows) continue;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = mt * 16 + g + 8 * half;
            float* dst = (w == kThreads / 32 - 1) ? ws : red;
            const bool store = w < kThreads / 32 - 1 || r < rows;
#pragma unroll
            for (int n = 0; n < 3; ++n) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int i = r * kPartials + n * 8 + 2 * q + e;
                float v = acc[mt][n][half * 2 + e];
                if (w > 0) v = red[i] + v;
                if (store) dst[i] = v;
              }
            }
            if (q == 0) {
              const int i = r * kPartials + kMhcMixes;
              float v = ss[mt][half];
              if (w > 0) v = red[i] + v;
              if (store) dst[i] = v;
            }
          }
        }
      }
      if (w < kThreads / 32 - 1) __syncthreads();
    }
  }
  cp_async_wait<0>();
}

// Decode shape (T <= kMhcPreDecodeMaxTokens): the partial kernel's per-warp accumulator chains
// spread over more SMs. In mhc_pre_partial_kernel the warp w of a split owns d-block w of every
// chunk, and its three n-tiles (mixes 8n .. 8n + 7) are three independent MMA chains over the
// split's chunks and copies. Here a CTA is one (split, w) pair and its warp n runs n-tile n's
// chain with exactly those MMAs in that order (warp 0 also does the sum of squares and the
// collapse of the same fragment values), all of the CTA's fn blocks and rows staged by one
// cp.async burst: 4 x as many CTAs as splits (64 at V4.1) instead of 16 CTAs of 4 warps that walk
// the chunks one stage after another. (Requesting the fn blocks before the PDL wait measured no
// faster in the forward: docs/PERF.md, twelfth session.) The 4 CTAs of a split are one cluster;
// rank 0 adds their parts in the partial kernel's warp order ((w0 + w1) + w2) + w3 through
// distributed shared memory and writes the split's partials: bitwise the same outputs (a test).
constexpr int kDecodeWarpParts = kChunk / 16;  // the partial kernel's warps per CTA
constexpr int kDecodeThreads = 3 * 32;         // one warp per n-tile
constexpr int kFnBlockWords = 576;

constexpr int kDecodeRedFloats = kDecodeWarpParts * 16 * kPartials;  // [part][row][25]

template <MhcStorage S>
constexpr int64_t decode_smem_bytes(int cps) {
  using Elem = typename TileCfg<S>::Elem;
  return int64_t{cps} * kMhcStreams * (kFnBlockWords * 4 + 16 * 16 * sizeof(Elem)) +
         kDecodeRedFloats * 4;
}

template <MhcStorage S>
__global__ void __cluster_dims__(kDecodeWarpParts, 1, 1) __launch_bounds__(kDecodeThreads)
    mhc_pre_decode_kernel(MhcPreParams p, int chunks_per_split) {
  using Elem = typename TileCfg<S>::Elem;
  constexpr int kRowB = 16 * static_cast<int>(sizeof(Elem));  // one row's 16 d of one copy
  constexpr int kRowPieces = kRowB / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  const int cps = chunks_per_split;
  auto* sfn = reinterpret_cast<uint32_t*>(smem);                     // [cps][copy][576 words]
  unsigned char* sx = smem + cps * kMhcStreams * kFnBlockWords * 4;  // [cps][copy][16][16 d]
  auto* red = reinterpret_cast<float*>(sx + cps * kMhcStreams * 16 * kRowB);  // rank 0's
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, n = tid >> 5, g = lane >> 2, q = lane & 3;
  const int split = static_cast<int>(blockIdx.x) / kDecodeWarpParts;
  const int w = static_cast<int>(blockIdx.x) % kDecodeWarpParts;
  const int64_t tokens = p.tokens, dim = p.dim;
  const int rows = static_cast<int>(tokens);
  // 16-d block of chunk c: kb0 + 4 c (d = 16 kb of every copy).
  const int64_t kb0 = static_cast<int64_t>(split) * cps * (kChunk / 16) + w;

  // One burst: the fn blocks [chunk][copy] and the rows' 16 d of every (chunk, copy).
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  // The copies walk (chunk, copy) blocks in a uniform outer loop, so each thread's address math
  // is a few adds: fn blocks are 144 pieces of 16 bytes (threads tid and tid + 96), a block of
  // rows is 16 rows x kRowPieces pieces (one thread each).
  constexpr int kFnPieces = kFnBlockWords / 4;               // 144
  const uint32_t* fn_c = p.fn_packed + kb0 * kFnBlockWords;  // chunk 0, copy 0
  const int64_t fn_copy = dim / 16 * kFnBlockWords, fn_chunk = (kChunk / 16) * kFnBlockWords;
  const Elem* x = static_cast<const Elem*>(p.stream);
  constexpr int kRowsPieces = 16 * kRowPieces;  // pieces of one (chunk, copy) block of rows
  const int xr = (tid % kRowsPieces) / kRowPieces, xp = tid % kRowPieces;
  const bool x_valid = xr < rows;
  const Elem* x_c = x + static_cast<int64_t>(xr) * kMhcStreams * dim + kb0 * 16 +
                    xp * (16 / static_cast<int>(sizeof(Elem)));
  for (int c = 0; c < cps; ++c) {
#pragma unroll
    for (int j = 0; j < kMhcStreams; ++j) {
      const int blk = c * kMhcStreams + j;
      const uint32_t* src = fn_c + j * fn_copy;
      uint32_t* dst = sfn + blk * kFnBlockWords;
      cp_async16(dst + tid * 4, src + tid * 4, true);
      if (tid + kDecodeThreads < kFnPieces) {
        cp_async16(dst + (tid + kDecodeThreads) * 4, src + (tid + kDecodeThreads) * 4, true);
      }
    }
    // Blocks of rows: kDecodeThreads / kRowsPieces blocks at a time (3 for bf16), the rest after.
    constexpr int kBlocksAtOnce = kDecodeThreads / kRowsPieces;
    for (int j0 = 0; j0 < kMhcStreams; j0 += kBlocksAtOnce) {
      const int j = j0 + tid / kRowsPieces;
      if (j < kMhcStreams && tid < kBlocksAtOnce * kRowsPieces) {
        cp_async16(sx + ((c * kMhcStreams + j) * 16 + xr) * kRowB + xp * 16,
                   x_valid ? x_c + j * dim : x, x_valid);
      }
    }
    fn_c += fn_chunk;
    x_c += kChunk;
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // This lane's words of n-tile n in a packed block: piece pc of pair h is lane word 6 pc + 2 n + h
  // (mhc_pack_fn).
  int fo[3][2];
#pragma unroll
  for (int pc = 0; pc < 3; ++pc) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int f = 6 * pc + 2 * n + h;
      fo[pc][h] = f < 16 ? (f >> 2) * 128 + lane * 4 + (f & 3) : 512 + lane * 2 + (f - 16);
    }
  }
  const float* carried = p.carried_pre;
  float acc[1][4] = {};
  float ss[2] = {0.0f, 0.0f};
  Elem* out = static_cast<Elem*>(p.collapsed);
  for (int c = 0; c < cps; ++c) {
    float col[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      col[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < kMhcStreams; ++j) {
      const uint32_t* blk = sfn + (c * kMhcStreams + j) * kFnBlockWords;
      Bf16Pieces bp[1][2];  // this n-tile's pieces, as in the tiled pass
#pragma unroll
      for (int pc = 0; pc < 3; ++pc) {
        bp[0][0].w[pc] = blk[fo[pc][0]];
        bp[0][1].w[pc] = blk[fo[pc][1]];
      }
      const unsigned char* row_lo = sx + ((c * kMhcStreams + j) * 16 + g) * kRowB;
      const unsigned char* row_hi = row_lo + 8 * kRowB;
      float v[8];
      uint32_t a[4];
      load_a_frag<S>(row_lo, row_hi, q, a, v);
      if (n == 0) {  // collapse and sum of squares: the partial kernel's operations
        const float p_lo = g < rows ? __ldg(carried + g * kMhcStreams + j) : 0.0f;
        const float p_hi = g + 8 < rows ? __ldg(carried + (g + 8) * kMhcStreams + j) : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float pj = (i & 2) ? p_hi : p_lo;
          col[i] = __fadd_rn(col[i], __fmul_rn(pj, v[i]));
          ss[(i >> 1) & 1] = __fmaf_rn(v[i], v[i], ss[(i >> 1) & 1]);
        }
      }
      mix_mmas<S, 1>(acc, a, v, bp);
    }
    if (n == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = g + 8 * half;
        if (r >= rows) continue;
        Elem* o = out + r * dim + (kb0 + (kChunk / 16) * c) * 16 + 2 * q;
#pragma unroll
        for (int cs = 0; cs < 2; ++cs) {
          const float lo = col[cs * 4 + half * 2], hi = col[cs * 4 + half * 2 + 1];
          if constexpr (S == MhcStorage::kBf16) {
            *reinterpret_cast<uint32_t*>(o + cs * 8) = bf16x2_bits(__floats2bfloat162_rn(lo, hi));
          } else {
            *reinterpret_cast<float2*>(o + cs * 8) = make_float2(lo, hi);
          }
        }
      }
    }
  }
  // Part w of the split into rank 0's [part][row][25]: the n-tile's 8 dot products per row, the
  // quad-summed sum of squares from warp 0. Rank 0 adds the parts in order into the workspace.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float v = ss[half];
    v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
    v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
    ss[half] = v;
  }
  cg::cluster_group cluster = cg::this_cluster();
  float* dst = cluster.map_shared_rank(red, 0) + w * 16 * kPartials;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = g + 8 * half;
    if (r >= rows) continue;
    dst[r * kPartials + n * 8 + 2 * q] = acc[0][half * 2];
    dst[r * kPartials + n * 8 + 2 * q + 1] = acc[0][half * 2 + 1];
    if (n == 0 && q == 0) dst[r * kPartials + kMhcMixes] = ss[half];
  }
  cluster.sync();
  if (w != 0) return;
  float* ws = p.workspace + static_cast<int64_t>(split) * tokens * kPartials;
  for (int i = tid; i < rows * kPartials; i += kDecodeThreads) {
    float v = red[i];
#pragma unroll
    for (int part = 1; part < kDecodeWarpParts; ++part)
      v = v + red[part * 16 * kPartials + i];
    ws[i] = v;
  }
}

__device__ __forceinline__ float sigmoid(float v) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-v)));
}

constexpr int kMaxSplits = kMhcPreMaxSplits;  // mhc_pre_splits(dim) <= this (mhc.cuh)

// 16 lanes per token, lane e = comb entry (j, k) = (e / 4, e % 4). Lane e sums partial 8 + e and,
// for e <= 8, partial e (pre / post mixes; e = 8: the sum of squares, partial 24) over the splits
// in order, then runs cpu::hc_mixes' epilogue; every value sees the same operation sequence as in
// the CPU reference, the row / column sums gathered by shuffles and added in index order.
// kBeside (mhc_pre_finalize with MhcFinalizeOrder::kBesidePrevious): the work comes before the
// PDL wait, so it overlaps the kernel launched just before; the wait at the end keeps the stream
// order for the kernels after. The workspace is read through L2 (ld.global.cg) either way.
template <bool kBeside>
__global__ void mhc_pre_finalize_kernel(MhcPreParams p, int splits) {
  if constexpr (!kBeside) cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr int hc = kMhcStreams;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int e = lane & 15, base = lane & 16, j = e >> 2, k = e & 3;
  const int64_t t_raw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 4;
  const bool live = t_raw < p.tokens;
  const int64_t t = live ? t_raw : p.tokens - 1;  // dead lanes still take part in the shuffles
  const int64_t stride = p.tokens * kPartials;
  const float* w = p.workspace + t * kPartials;
  const int ai = e < 8 ? e : kMhcMixes;
  float vc[kMaxSplits], va[kMaxSplits];
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s) {
    vc[s] = s < splits ? __ldcg(w + s * stride + 2 * hc + e) : 0.0f;
    va[s] = s < splits && e <= 8 ? __ldcg(w + s * stride + ai) : 0.0f;
  }
  float mc = 0.0f, ma = 0.0f;
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s) {
    if (s < splits) {
      mc = __fadd_rn(mc, vc[s]);
      ma = __fadd_rn(ma, va[s]);
    }
  }
  const float sq = __shfl_sync(0xFFFFFFFFu, ma, base + 8);
  const float width = static_cast<float>(kMhcStreams * p.dim);
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sq, width), p.norm_eps)));
  const float eps = p.hc_eps;
  const float* sc = p.scale;
  const float* b = p.base;
  if (live && e < hc) {
    const float mp = __fmul_rn(ma, r);
    p.pre[t * hc + e] = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(mp, sc[0]), b[e])), eps);
  } else if (live && e < 2 * hc) {
    const float mq = __fmul_rn(ma, r);
    p.post[t * hc + e - hc] = __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(mq, sc[1]), b[e])));
  }
  auto row_sum = [&](float v) {  // ((0 + v[j][0]) + v[j][1]) + ... over this lane's row
    float s = 0.0f;
#pragma unroll
    for (int kk = 0; kk < hc; ++kk)
      s = __fadd_rn(s, __shfl_sync(0xFFFFFFFFu, v, base + j * hc + kk));
    return s;
  };
  auto col_sum = [&](float v) {  // over this lane's column, j ascending
    float s = 0.0f;
#pragma unroll
    for (int jj = 0; jj < hc; ++jj)
      s = __fadd_rn(s, __shfl_sync(0xFFFFFFFFu, v, base + jj * hc + k));
    return s;
  };
  float cm = __fadd_rn(__fmul_rn(__fmul_rn(mc, r), sc[2]), b[2 * hc + e]);
  float mx = -INFINITY;
#pragma unroll
  for (int kk = 0; kk < hc; ++kk)
    mx = fmaxf(mx, __shfl_sync(0xFFFFFFFFu, cm, base + j * hc + kk));
  cm = expf(__fsub_rn(cm, mx));
  cm = __fadd_rn(__fdiv_rn(cm, row_sum(cm)), eps);
  cm = __fdiv_rn(cm, __fadd_rn(col_sum(cm), eps));
  for (int it = 0; it + 1 < p.sinkhorn_iters; ++it) {
    cm = __fdiv_rn(cm, __fadd_rn(row_sum(cm), eps));
    cm = __fdiv_rn(cm, __fadd_rn(col_sum(cm), eps));
  }
  if (live) p.comb[t * hc * hc + e] = cm;
  if constexpr (kBeside) cuda_detail::pdl_wait();
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// Raise the shared-memory limit and return the number of CTAs the current device holds at once
// (the persistent grid); queried on every launch rather than remembered in process-wide state.
// The grid size changes only which CTA does an item, never how a row is computed.
template <MhcStorage S, bool kSmall, int kStages>
int resident_ctas() {
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  constexpr int kSmem = smem_bytes<S, kSmall, kStages>();
  DI_CUDA_CHECK(cudaFuncSetAttribute(mhc_pre_partial_kernel<S, kSmall, kStages>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int per_sm = 0, sms = 0;
  DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, mhc_pre_partial_kernel<S, kSmall, kStages>, kThreads, kSmem));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return per_sm * sms > 0 ? per_sm * sms : 1;
}

template <MhcStorage S, bool kSmall, int kStages>
void launch_partial(const MhcPreParams& p, int splits, MhcPreGrid mode, cudaStream_t stream) {
  const int64_t resident = resident_ctas<S, kSmall, kStages>();
  constexpr int kRows = Tile<S, kSmall>::kRows;
  const int64_t tiles = (p.tokens + kRows - 1) / kRows;
  const int64_t items = tiles * splits;
  const int64_t grid = mode == MhcPreGrid::kPersistent && items > resident ? resident : items;
  const int chunks_per_split = static_cast<int>(p.dim / kChunk / splits);
  DI_CHECK(items < (int64_t{1} << 31) && (items / grid + 1) * chunks_per_split < (int64_t{1} << 31),
           "mhc_pre: {} tokens is too many", p.tokens);
  cuda_detail::launch_pdl(mhc_pre_partial_kernel<S, kSmall, kStages>, static_cast<unsigned>(grid),
                          kThreads, smem_bytes<S, kSmall, kStages>(), stream, p, splits,
                          chunks_per_split, tiles);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

namespace {

// The pass over the stream (partials and collapse); false when there are no tokens.
bool launch_pass(const MhcPreParams& p, int stages, MhcPreGrid grid, cudaStream_t stream,
                 MhcPreTile tile) {
  DI_CHECK(p.tokens >= 0, "mhc_pre: negative token count {}", p.tokens);
  DI_CHECK(stages == 2 || stages == 3, "mhc_pre: {} pipeline stages (2 or 3)", stages);
  const int splits = mhc_pre_splits(p.dim);  // checks dim
  if (p.tokens == 0) return false;
  DI_CHECK(p.stream != nullptr && p.fn_packed != nullptr && p.scale != nullptr &&
               p.base != nullptr && p.carried_pre != nullptr && p.collapsed != nullptr &&
               p.pre != nullptr && p.post != nullptr && p.comb != nullptr && p.workspace != nullptr,
           "mhc_pre: null pointer (T={}, dim={})", p.tokens, p.dim);
  DI_CHECK(aligned(p.stream, 16) && aligned(p.fn_packed, 16) && aligned(p.collapsed, 8),
           "mhc_pre: stream / fn_packed must be 16-byte and collapsed 8-byte aligned");
  DI_CHECK(p.sinkhorn_iters >= 1, "mhc_pre: sinkhorn_iters {} < 1", p.sinkhorn_iters);
  const bool bf16 = p.storage == MhcStorage::kBf16;
  const int cps = static_cast<int>(p.dim / kChunk / splits);
  const int64_t decode_smem =
      bf16 ? decode_smem_bytes<MhcStorage::kBf16>(cps) : decode_smem_bytes<MhcStorage::kF32>(cps);
  const bool decode_fits =
      p.tokens <= kMhcPreDecodeMaxTokens && decode_smem <= cuda_detail::kSm90MaxSmemPerBlock;
  if (tile == MhcPreTile::kAuto) {
    tile = decode_fits                             ? MhcPreTile::kDecode
           : p.tokens <= kMhcPreSmallTileMaxTokens ? MhcPreTile::kSmall
                                                   : MhcPreTile::kLarge;
  }
  DI_CHECK(splits <= kMaxSplits, "mhc_pre: {} splits > {}", splits, kMaxSplits);
  if (tile == MhcPreTile::kDecode) {
    DI_CHECK(decode_fits,
             "mhc_pre: the decode pass takes at most {} tokens and {} bytes of shared memory ({} "
             "tokens, dim {})",
             kMhcPreDecodeMaxTokens, cuda_detail::kSm90MaxSmemPerBlock, p.tokens, p.dim);
    const auto kernel =
        bf16 ? mhc_pre_decode_kernel<MhcStorage::kBf16> : mhc_pre_decode_kernel<MhcStorage::kF32>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(decode_smem)));
    cuda_detail::launch_pdl(kernel, static_cast<unsigned>(splits * kDecodeWarpParts),
                            kDecodeThreads, static_cast<size_t>(decode_smem), stream, p, cps);
    DI_CUDA_CHECK(cudaGetLastError());
    return true;
  }
  const bool small = tile == MhcPreTile::kSmall;
  using L = void (*)(const MhcPreParams&, int, MhcPreGrid, cudaStream_t);
  // [small][bf16][stages == 3]
  constexpr L kLaunch[2][2][2] = {
      {{launch_partial<MhcStorage::kF32, false, 2>, launch_partial<MhcStorage::kF32, false, 3>},
       {launch_partial<MhcStorage::kBf16, false, 2>, launch_partial<MhcStorage::kBf16, false, 3>}},
      {{launch_partial<MhcStorage::kF32, true, 2>, launch_partial<MhcStorage::kF32, true, 3>},
       {launch_partial<MhcStorage::kBf16, true, 2>, launch_partial<MhcStorage::kBf16, true, 3>}}};
  kLaunch[small][bf16][stages == 3](p, splits, grid, stream);
  return true;
}

}  // namespace

void mhc_pre_finalize(const MhcPreParams& p, cudaStream_t stream, MhcFinalizeOrder order) {
  const int splits = mhc_pre_splits(p.dim);
  DI_CHECK(splits <= kMaxSplits, "mhc_pre: {} splits > {}", splits, kMaxSplits);
  if (p.tokens <= 0) return;
  DI_CHECK(p.workspace != nullptr && p.scale != nullptr && p.base != nullptr && p.pre != nullptr &&
               p.post != nullptr && p.comb != nullptr,
           "mhc_pre_finalize: null workspace / scale / base / pre / post / comb (T={}, dim={})",
           p.tokens, p.dim);
  // 16 lanes per token, 4 tokens per block: the epilogue is latency-bound, so spread it wide.
  constexpr int kFinalizeThreads = 64;
  const int64_t blocks = (p.tokens * 16 + kFinalizeThreads - 1) / kFinalizeThreads;
  cuda_detail::launch_pdl(order == MhcFinalizeOrder::kBesidePrevious
                              ? mhc_pre_finalize_kernel<true>
                              : mhc_pre_finalize_kernel<false>,
                          static_cast<unsigned>(blocks), kFinalizeThreads, 0, stream, p, splits);
  DI_CUDA_CHECK(cudaGetLastError());
}

void mhc_pre_with_config(const MhcPreParams& p, int stages, MhcPreGrid grid, cudaStream_t stream,
                         MhcPreTile tile) {
  if (launch_pass(p, stages, grid, stream, tile)) {
    mhc_pre_finalize(p, stream, MhcFinalizeOrder::kAfterPass);
  }
}

void mhc_pre_pass(const MhcPreParams& p, cudaStream_t stream) {
  launch_pass(p, kDefaultStages, kDefaultGrid, stream, MhcPreTile::kAuto);
}

void mhc_pre(const MhcPreParams& p, cudaStream_t stream) {
  // Both tiles measured fastest with 2 stages (small: 2 CTAs per SM; docs/PERF.md 2026-12-01).
  mhc_pre_with_config(p, kDefaultStages, kDefaultGrid, stream, MhcPreTile::kAuto);
}

}  // namespace di
