// LM head (kernels/params/dense_ops.h): logits[m, n] = sum_k x[m, k] * W[n, k] on CUDA cores with
// one fixed accumulation order per output, whatever the number of rows:
//   lane l of a warp accumulates k in chunks of 8 (chunk j*32 + l, j ascending; the 8 elements
//   ascending) with fp32 fma; then a fixed xor butterfly over the 32 lanes.
// A warp owns 4 vocabulary rows and walks the activation rows in tiles of kM (1..8); the tile
// size changes how often W is re-read, never an output's arithmetic, so rows are batch-invariant.
// At small M the kernel streams W once (1.32 GB for 129,280 x 5,120) with 16-byte loads; at
// M >~ 16 it becomes FFMA-bound (2 * M * vocab * dim flops on CUDA cores).
// M >= 16 (dim % 512 == 0) runs a tiled variant with the same per-output arithmetic: 16 rows per
// tile, whose activations the CTA's 8 warps share through shared memory in stages of 512 k (the
// plain kernel reads each x row from L2 once per warp: at M = 256 that traffic, not the FMAs,
// took ~50 ms per head on the H200), and W re-read once per 16 rows instead of 8; the row tiles
// spread over the grid's y (a 384-row router at M = 64: 4 x 12 CTAs, not 12 walking 4 tiles).
//
// x is fp32 or bf16 (LmHeadParams::x_precision: the bf16 precision's router and head read the
// activations as stored); bf16 values are widened exactly on load, so the arithmetic and the
// bits are those of the same values given in fp32.
//
// dim % 256 != 0 (the small projections of the fixture models: router gate, compressor and
// indexer weights at dims like 192 or 64) runs a scalar variant of the same contract: lane l
// accumulates k = l, l + 32, ... ascending (fp32 fma), then the same butterfly; the choice
// depends on dim only, so it never breaks batch invariance.

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/lm_head.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kN = 4;  // vocabulary rows per warp

// Sums each accumulator over the warp (fixed xor butterfly); lane m * kN + n gets output (m, n).
template <int kM>
__device__ __forceinline__ float warp_sums(const float (&acc)[kM][kN], int lane) {
  static_assert(kM * kN <= 32, "one output per lane");
  float mine = 0.0f;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      float s = acc[m][n];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == m * kN + n) mine = s;
    }
  }
  return mine;
}

// warp_sums, then stores tile [kM rows, kN vocab rows]: lane m * kN + n writes output
// (m0 + m, n0 + n).
template <int kM>
__device__ __forceinline__ void store_tile(const float (&acc)[kM][kN], int lane, int64_t m0,
                                           int64_t n0, float* __restrict__ out, int64_t rows,
                                           int64_t vocab, int64_t out_stride) {
  const float mine = warp_sums<kM>(acc, lane);
  const int m = lane / kN;
  const int n = lane % kN;
  if (m < kM && m0 + m < rows && n0 + n < vocab) out[(m0 + m) * out_stride + n0 + n] = mine;
}

// 8 bf16 values (16 bytes) widened to fp32 (exact).
__device__ __forceinline__ void widen_bf16x8(const uint4& v, float (&f)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    f[2 * e] = __uint_as_float(words[e] << 16);
    f[2 * e + 1] = __uint_as_float(words[e] & 0xFFFF0000u);
  }
}

// 8 bf16 weights of each of the warp's vocabulary rows (16 bytes each), widened (exact).
__device__ __forceinline__ void widen_w8(const uint4 (&raw)[kN], float (&wf)[kN][8]) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
    widen_bf16x8(raw[n], wf[n]);
}

// The 8 bf16 weights at k of each of the warp's vocabulary rows, widened (exact).
__device__ __forceinline__ void load_w8(const uint16_t* const (&wrow)[kN], int64_t k,
                                        float (&wf)[kN][8]) {
  uint4 raw[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n)
    raw[n] = __ldg(reinterpret_cast<const uint4*>(wrow[n] + k));
  widen_w8(raw, wf);
}

// A row's 8 activations as loaded (fp32: two 16-byte loads; bf16: one), widened at use.
template <typename XT>
struct XRaw;
template <>
struct XRaw<float> {
  float4 a, b;
};
template <>
struct XRaw<uint16_t> {
  uint4 v;
};
__device__ __forceinline__ void load_x_raw(const float* xr, XRaw<float>& r) {
  r.a = *reinterpret_cast<const float4*>(xr);
  r.b = *reinterpret_cast<const float4*>(xr + 4);
}
__device__ __forceinline__ void load_x_raw(const uint16_t* xr, XRaw<uint16_t>& r) {
  r.v = *reinterpret_cast<const uint4*>(xr);
}
__device__ __forceinline__ void widen_x(const XRaw<float>& r, float (&xv)[8]) {
  xv[0] = r.a.x, xv[1] = r.a.y, xv[2] = r.a.z, xv[3] = r.a.w;
  xv[4] = r.b.x, xv[5] = r.b.y, xv[6] = r.b.z, xv[7] = r.b.w;
}
__device__ __forceinline__ void widen_x(const XRaw<uint16_t>& r, float (&xv)[8]) {
  widen_bf16x8(r.v, xv);
}

// A row's 8 activations at xr, widened: two 16-byte loads (fp32) or one (bf16 bits, exact).
template <typename XT>
__device__ __forceinline__ void load_x8(const XT* xr, float (&xv)[8]) {
  XRaw<XT> r;
  load_x_raw(xr, r);
  widen_x(r, xv);
}
__device__ __forceinline__ float widen(float v) {
  return v;
}
__device__ __forceinline__ float widen(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

// One row's 8 activations (at xr) into its kN accumulators: e ascending, the order every output
// of every variant uses.
__device__ __forceinline__ void fma8_values(const float (&xv)[8], const float (&wf)[kN][8],
                                            float (&acc)[kN]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
#pragma unroll
    for (int n = 0; n < kN; ++n)
      acc[n] = fmaf(xv[e], wf[n][e], acc[n]);
  }
}
template <typename XT>
__device__ __forceinline__ void fma8(const XT* xr, const float (&wf)[kN][8], float (&acc)[kN]) {
  float xv[8];
  load_x8(xr, xv);
  fma8_values(xv, wf, acc);
}

template <int kM, typename XT>
__global__ void __launch_bounds__(kThreads, 2)
    lm_head_kernel(const XT* __restrict__ x, const uint16_t* __restrict__ w,
                   float* __restrict__ out, int64_t rows, int64_t vocab, int64_t dim,
                   int64_t out_stride) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kN;
  if (n0 >= vocab) return;
  const uint16_t* wrow[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n)
    wrow[n] = w + (n0 + n < vocab ? n0 + n : n0) * dim;
  const int iters = static_cast<int>(dim / 256);

  for (int64_t m0 = 0; m0 < rows; m0 += kM) {
    float acc[kM][kN];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
        acc[m][n] = 0.0f;
    }
#pragma unroll 4
    for (int j = 0; j < iters; ++j) {
      const int64_t k = (static_cast<int64_t>(j) * 32 + lane) * 8;
      float wf[kN][8];
      load_w8(wrow, k, wf);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m0 + m >= rows) break;
        fma8(x + (m0 + m) * dim + k, wf, acc[m]);
      }
    }
    store_tile<kM>(acc, lane, m0, n0, out, rows, vocab, out_stride);
  }
}

// The dim % 256 != 0 variant: lane l accumulates k = l, l + 32, ... (scalar loads, no alignment
// beyond the elements'), rows in tiles of 8 (the tile changes no output's arithmetic).
constexpr int kGenericM = 8;

template <typename XT>
__global__ void __launch_bounds__(kThreads)
    lm_head_generic_kernel(const XT* __restrict__ x, const uint16_t* __restrict__ w,
                           float* __restrict__ out, int64_t rows, int64_t vocab, int64_t dim,
                           int64_t out_stride) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kN;
  if (n0 >= vocab) return;
  const uint16_t* wrow[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n)
    wrow[n] = w + (n0 + n < vocab ? n0 + n : n0) * dim;

  for (int64_t m0 = 0; m0 < rows; m0 += kGenericM) {
    float acc[kGenericM][kN];
#pragma unroll
    for (int m = 0; m < kGenericM; ++m) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
        acc[m][n] = 0.0f;
    }
    for (int64_t k = lane; k < dim; k += 32) {
      float wf[kN];
#pragma unroll
      for (int n = 0; n < kN; ++n)
        wf[n] = __uint_as_float(static_cast<uint32_t>(__ldg(wrow[n] + k)) << 16);
#pragma unroll
      for (int m = 0; m < kGenericM; ++m) {
        if (m0 + m >= rows) break;
        const float xv = widen(__ldg(x + (m0 + m) * dim + k));
#pragma unroll
        for (int n = 0; n < kN; ++n)
          acc[m][n] = fmaf(xv, wf[n], acc[m][n]);
      }
    }
    store_tile<kGenericM>(acc, lane, m0, n0, out, rows, vocab, out_stride);
  }
}

// The tiled variant. Lane l of a warp still owns k chunks j * 32 + l (8 elements each, j
// ascending, fmaf in the same operand order) and the butterfly is the same, so every output has
// the plain kernel's bits; the tile only changes where x comes from (shared memory) and how
// many rows share one pass over W.
constexpr int kTileM = 16;
constexpr int kStageK = 512;  // two 256-element chunk rounds per stage: 32 KB of x

template <typename XT>
__global__ void __launch_bounds__(kThreads)
    lm_head_tiled_kernel(const XT* __restrict__ x, const uint16_t* __restrict__ w,
                         float* __restrict__ out, int64_t rows, int64_t vocab, int64_t dim,
                         int64_t out_stride) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ __align__(16) float xs[kTileM][kStageK];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kN;
  const bool active = n0 < vocab;  // idle warps still help stage x and reach every barrier
  const uint16_t* wrow[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n)
    wrow[n] = w + (active && n0 + n < vocab ? n0 + n : 0) * dim;

  // Row tiles blockIdx.y, + gridDim.y, ...: the small heads (routers: a few hundred vocabulary
  // rows, a dozen CTAs in x) spread their row tiles over CTAs instead of walking them in turn.
  for (int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM; m0 < rows;
       m0 += static_cast<int64_t>(gridDim.y) * kTileM) {
    float acc[kTileM][kN];
#pragma unroll
    for (int m = 0; m < kTileM; ++m) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
        acc[m][n] = 0.0f;
    }
    for (int64_t k0 = 0; k0 < dim; k0 += kStageK) {
      // The stage's W chunks, requested before the x staging so that both round trips overlap
      // (idle warps load row 0's chunks and never use them).
      uint4 wraw[kStageK / 256][kN];
#pragma unroll
      for (int jj = 0; jj < kStageK / 256; ++jj) {
#pragma unroll
        for (int n = 0; n < kN; ++n)
          wraw[jj][n] = __ldg(reinterpret_cast<const uint4*>(wrow[n] + k0 + (jj * 32 + lane) * 8));
      }
      __syncthreads();  // the previous stage is consumed
      for (int i = static_cast<int>(threadIdx.x); i < kTileM * kStageK / 4; i += kThreads) {
        const int m = i / (kStageK / 4);
        const int c = (i % (kStageK / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (m0 + m < rows) {
          const XT* src = x + (m0 + m) * dim + k0 + c;
          if constexpr (sizeof(XT) == 4) {
            v = __ldg(reinterpret_cast<const float4*>(src));
          } else {
            const uint2 b = __ldg(reinterpret_cast<const uint2*>(src));
            v = make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xFFFF0000u),
                            __uint_as_float(b.y << 16), __uint_as_float(b.y & 0xFFFF0000u));
          }
        }
        *reinterpret_cast<float4*>(&xs[m][c]) = v;
      }
      __syncthreads();
      if (!active) continue;
#pragma unroll
      for (int jj = 0; jj < kStageK / 256; ++jj) {
        const int kk = (jj * 32 + lane) * 8;  // within the stage
        float wf[kN][8];
        widen_w8(wraw[jj], wf);
#pragma unroll
        for (int m = 0; m < kTileM; ++m)
          fma8(&xs[m][kk], wf, acc[m]);
      }
    }
    if (!active) continue;
    // Two halves of 8 rows through the plain kernel's store (one output per lane each).
    float half[8][kN];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int m = 0; m < 8; ++m) {
#pragma unroll
        for (int n = 0; n < kN; ++n)
          half[m][n] = acc[h * 8 + m][n];
      }
      store_tile<8>(half, lane, m0 + h * 8, n0, out, rows, vocab, out_stride);
    }
  }
}

// The small heads (vocab <= kLmHeadKSplitMaxVocab: the routers, the compressor and indexer
// projections): the plain kernel gives them vocab / 32 CTAs (12 for a 384-row router), each warp
// walking all of dim, so they ran latency-bound (H200, bf16 rows: ~7 us at M = 1 and ~66 us at
// M = 8 for 3.9 MB of weights). Here a CTA owns kN vocabulary rows and its 8 warps split dim:
// warp w takes the 256-element chunks w, w + 8, ... ascending; lane l the 8 elements (chunk, l)
// as in the plain kernel (fp32 fma, e ascending); then the same butterfly per warp, then the
// warps' sums added in warp order. The order depends on dim only: rows stay batch-invariant. Row
// tiles (1 to 8 rows) spread over the grid's y; W is re-read once per tile (from L2).
template <int kSplitM, typename XT>
__global__ void __launch_bounds__(kThreads)
    lm_head_ksplit_kernel(const XT* __restrict__ x, const uint16_t* __restrict__ w,
                          float* __restrict__ out, int64_t rows, int64_t vocab, int64_t dim,
                          int64_t out_stride) {
  static_assert(kSplitM * kN <= 32, "one output per lane");
  __shared__ float part[kWarps][32];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kN;
  const uint16_t* wrow[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n)
    wrow[n] = w + (n0 + n < vocab ? n0 + n : n0) * dim;
  const int chunks = static_cast<int>(dim / 256);
  auto load_chunk = [&](int c, uint4(&raw)[kN]) {
#pragma unroll
    for (int n = 0; n < kN; ++n)
      raw[n] = __ldg(reinterpret_cast<const uint4*>(wrow[n] + (c * 32 + lane) * 8));
  };
  // The weights do not depend on the previous kernel: the first chunk is requested before the
  // wait.
  uint4 next[kN];
  if (warp < chunks) load_chunk(warp, next);
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  for (int64_t m0 = static_cast<int64_t>(blockIdx.y) * kSplitM; m0 < rows;
       m0 += static_cast<int64_t>(gridDim.y) * kSplitM) {
    float acc[kSplitM][kN];
#pragma unroll
    for (int m = 0; m < kSplitM; ++m) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
        acc[m][n] = 0.0f;
    }
    for (int c = warp; c < chunks; c += kWarps) {
      const int64_t k = (static_cast<int64_t>(c) * 32 + lane) * 8;
      // The tile's activations are all requested at once (rows past the end repeat the last
      // row: no branch between the loads; their sums are never stored).
      XRaw<XT> xr[kSplitM];
#pragma unroll
      for (int m = 0; m < kSplitM; ++m)
        load_x_raw(x + (m0 + m < rows ? m0 + m : rows - 1) * dim + k, xr[m]);
      float wf[kN][8];
      widen_w8(next, wf);
      // The warp's next chunk (or the next row tile's first) in flight while this one is used.
      if (c + kWarps < chunks) {
        load_chunk(c + kWarps, next);
      } else if (m0 + static_cast<int64_t>(gridDim.y) * kSplitM < rows) {
        load_chunk(warp, next);
      }
#pragma unroll
      for (int m = 0; m < kSplitM; ++m) {
        float xv[8];
        widen_x(xr[m], xv);
        fma8_values(xv, wf, acc[m]);
      }
    }
    // Per warp: the butterfly (lane m * kN + n holds output (m, n)); then warp 0 adds the warps'
    // sums in warp order.
    part[warp][lane] = warp_sums<kSplitM>(acc, lane);
    __syncthreads();
    if (warp == 0) {
      float s = part[0][lane];
#pragma unroll
      for (int v = 1; v < kWarps; ++v)
        s += part[v][lane];
      const int m = lane / kN, n = lane % kN;
      if (m < kSplitM && m0 + m < rows && n0 + n < vocab) out[(m0 + m) * out_stride + n0 + n] = s;
    }
    __syncthreads();  // part is reused by the next row tile
  }
}

// CTAs of kWarps warps, kN vocabulary rows per warp (every CUDA-core kernel here).
unsigned warp_grid(int64_t vocab) {
  const int64_t warps = (vocab + kN - 1) / kN;
  return static_cast<unsigned>((warps + kWarps - 1) / kWarps);
}

template <int kM, typename XT>
void launch(const LmHeadParams& p, const XT* x, int64_t stride, cudaStream_t stream) {
  cuda_detail::launch_pdl(lm_head_kernel<kM, XT>, warp_grid(p.vocab), kThreads, 0, stream, x,
                          p.weight, p.logits, p.rows, p.vocab, p.dim, stride);
}

// The kernel for this shape, x of element type XT (fp32, or bf16 bits widened on load).
template <typename XT>
void dispatch(const LmHeadParams& p, int64_t stride, cudaStream_t stream) {
  const auto* x = static_cast<const XT*>(p.x);
  if (p.dim % 256 != 0) {
    cuda_detail::launch_pdl(lm_head_generic_kernel<XT>, warp_grid(p.vocab), kThreads, 0, stream, x,
                            p.weight, p.logits, p.rows, p.vocab, p.dim, stride);
    return;
  }
  DI_CHECK(
      reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.weight) % 16 == 0,
      "lm_head: x and weight must be 16-byte aligned");
  if (p.vocab <= kLmHeadKSplitMaxVocab) {
    // The row tile (1, 2, 4 or 8 rows) sets only how the rows are spread over the grid, never
    // an output's arithmetic.
    const int tile = p.rows >= 8 ? 8 : p.rows >= 4 ? 4 : p.rows >= 2 ? 2 : 1;
    const int64_t tiles = (p.rows + tile - 1) / tile;
    const dim3 grid(static_cast<unsigned>((p.vocab + kN - 1) / kN),
                    static_cast<unsigned>(tiles < 65535 ? tiles : 65535));
    auto kernel = tile == 8   ? lm_head_ksplit_kernel<8, XT>
                  : tile == 4 ? lm_head_ksplit_kernel<4, XT>
                  : tile == 2 ? lm_head_ksplit_kernel<2, XT>
                              : lm_head_ksplit_kernel<1, XT>;
    cuda_detail::launch_pdl(kernel, grid, kThreads, 0, stream, x, p.weight, p.logits, p.rows,
                            p.vocab, p.dim, stride);
    return;
  }
  // The row tile only sets how often W is re-read: every output's arithmetic is the same.
  // H200: kM = 8 re-reads W half as often as 4 (M = 8: 1.12 ms vs 1.42 ms with two kM = 4
  // tiles); below 8 rows the smaller tiles waste no lanes.
  if (p.rows >= kTileM && p.dim % kStageK == 0) {
    const int64_t tiles = (p.rows + kTileM - 1) / kTileM;
    const dim3 grid(warp_grid(p.vocab), static_cast<unsigned>(tiles < 65535 ? tiles : 65535));
    cuda_detail::launch_pdl(lm_head_tiled_kernel<XT>, grid, kThreads, 0, stream, x, p.weight,
                            p.logits, p.rows, p.vocab, p.dim, stride);
  } else if (p.rows >= 8) {
    launch<8>(p, x, stride, stream);
  } else if (p.rows >= 4) {
    launch<4>(p, x, stride, stream);
  } else if (p.rows >= 2) {
    launch<2>(p, x, stride, stream);
  } else {
    launch<1>(p, x, stride, stream);
  }
}

}  // namespace

namespace lm_head_detail {

int64_t checked_stride(const char* op, const LmHeadParams& p) {
  const int64_t stride = p.logits_stride != 0 ? p.logits_stride : p.vocab;
  DI_CHECK(p.rows >= 0 && p.vocab > 0 && p.dim > 0,
           "{}: bad shape [rows {}, dim {}] x [vocab {}, dim]: dim and vocab must be positive", op,
           p.rows, p.dim, p.vocab);
  DI_CHECK(stride >= p.vocab, "{}: logits row stride {} < vocab {}", op, stride, p.vocab);
  DI_CHECK(p.x_precision == ActPrecision::kF32 || p.x_precision == ActPrecision::kBF16,
           "{}: x precision {} (fp32 or bf16)", op, static_cast<int>(p.x_precision));
  DI_CHECK(p.rows == 0 || (p.x != nullptr && p.weight != nullptr && p.logits != nullptr),
           "{}: null x/weight/logits ({} rows)", op, p.rows);
  return stride;
}

}  // namespace lm_head_detail

bool lm_head_uses_tensor_cores(const LmHeadParams& p) {
  return p.x_precision == ActPrecision::kBF16 && p.vocab >= kLmHeadTensorCoreMinVocab &&
         p.dim % kLmHeadTensorCoreDimMultiple == 0;
}

void lm_head(const LmHeadParams& p, cudaStream_t stream) {
  if (lm_head_uses_tensor_cores(p)) {
    lm_head_tensor_core(p, stream);
    return;
  }
  lm_head_cuda_core(p, stream);
}

void lm_head_cuda_core(const LmHeadParams& p, cudaStream_t stream) {
  const int64_t stride = lm_head_detail::checked_stride("lm_head", p);
  if (p.rows == 0) return;
  if (p.x_precision == ActPrecision::kBF16) {
    dispatch<uint16_t>(p, stride, stream);
  } else {
    dispatch<float>(p, stride, stream);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
