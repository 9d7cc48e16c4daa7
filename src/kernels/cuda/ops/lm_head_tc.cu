// LM head on the tensor cores (kernels/params/dense_ops.h LmHeadParams): logits[m, n] =
// sum_k x[m, k] * W[n, k], bf16 W, x fp32 or bf16, fp32 logits. lm_head() dispatches to it for
// bf16 activations against the vocabulary heads (lm_head.cuh); its parity test is
// tests/kernels/dense_ops/lm_head_test.cc (TensorCoreMatchesCpuAndIsBatchInvariant).
//
// Exactness: a bf16 x times a bf16 weight is exact in fp32. An fp32 x is split into three bf16
// pieces x = hi + mid + lo (each subtraction exact; exact for normal values), so every product
// the tensor cores form is exact and only the fp32 accumulation rounds (bf16 x: one piece).
// Order: each output accumulates in its own fp32 registers, k ascending in steps of 16 (one
// mma.sync m16n8k16 each), per step the pieces lo, mid, hi; the MMA keeps the columns (x rows)
// independent, so a row's logits never depend on the other rows or on the number of rows
// (bitwise batch-invariant). The order differs from the CUDA-core kernels': one kernel family
// must serve every row count of a given head.
//
// Tiling: a CTA owns 128 vocabulary rows (the MMA's M) x 64 activation rows (its N) and streams
// W and x through a cp.async ring of 64 k per stage (18 KiB of W per stage: at one activation
// row the kernel is a weight stream). 2 CTAs per SM; 4 stages for bf16 x (108 KiB per CTA),
// 3 for fp32 x (its x tiles are twice the size). 8 warps: warp w covers vocabulary rows 32 (w % 4)
// .. + 32 and activation rows 32 (w / 4) .. + 32 (2 x 4 MMA tiles); a warp whose activation rows
// are all past `rows` skips its MMAs.

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops/lm_head.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/sm90_limits.h"

namespace di {
namespace {

using cuda_detail::cp_async16;
using cuda_detail::cp_async_commit;
using cuda_detail::cp_async_wait;
using cuda_detail::ldsm_x4;
using cuda_detail::mma_bf16;
using cuda_detail::smem_u32;

constexpr int kThreads = 256;
constexpr int kTileV = 128;                                          // vocabulary rows per CTA
constexpr int kTileM = 64;                                           // activation rows per CTA
constexpr int kBK = static_cast<int>(kLmHeadTensorCoreDimMultiple);  // k per stage (lm_head.cuh)
constexpr int kPad = 8;               // elements of row padding (conflict-free fragment loads)
constexpr int kWStride = kBK + kPad;  // bf16 elements per W row in shared memory (144 bytes)
constexpr int kXStride = kBK + kPad;  // elements (fp32 or bf16) per x row in shared memory

template <typename XT>
constexpr int stage_bytes() {
  return kTileV * kWStride * 2 + kTileM * kXStride * static_cast<int>(sizeof(XT));
}
template <typename XT>
constexpr int stages() {
  return sizeof(XT) == 2 ? 4 : 3;
}
template <typename XT>
constexpr int smem_bytes() {
  return stages<XT>() * stage_bytes<XT>();
}
constexpr int64_t kPerCta(int64_t bytes) {
  return bytes + cuda_detail::kSm90SmemReservedPerCta;
}
static_assert(2 * kPerCta(smem_bytes<uint16_t>()) <= cuda_detail::kSm90SmemPerSm &&
                  2 * kPerCta(smem_bytes<float>()) <= cuda_detail::kSm90SmemPerSm,
              "two CTAs per multiprocessor");

// The B fragment words of one x pair (k, k + 1) of a row: pieces [0] = hi, [1] = mid, [2] = lo
// with hi + mid + lo = the pair exactly (fp32), or hi = the pair (bf16 bits; mid = lo = 0).
using Pieces = cuda_detail::Bf16Pieces;
__device__ __forceinline__ Pieces pieces_of(const float* p) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  return cuda_detail::split3_bf16(v.x, v.y);
}
__device__ __forceinline__ Pieces pieces_of(const uint16_t* p) {
  return {{*reinterpret_cast<const uint32_t*>(p), 0u, 0u}};
}

template <typename XT>
__global__ void __launch_bounds__(kThreads, 2)
    lm_head_tc_kernel(const XT* __restrict__ x, const uint16_t* __restrict__ w,
                      float* __restrict__ out, int64_t rows, int64_t vocab, int64_t dim,
                      int64_t out_stride) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr bool kF32 = sizeof(XT) == 4;
  constexpr int kPiecesUsed = kF32 ? 3 : 1;
  constexpr int kStages = stages<XT>();
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int wv = warp & 3, wm = warp >> 2;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kTileV;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int nk = static_cast<int>(dim / kBK);

  auto w_tile = [&](int s) { return reinterpret_cast<uint16_t*>(smem + s * stage_bytes<XT>()); };
  auto x_tile = [&](int s) {
    return reinterpret_cast<XT*>(smem + s * stage_bytes<XT>() + kTileV * kWStride * 2);
  };

  // One stage: W [128 rows][64 k] (8 pieces of 16 bytes per row), x [64 rows][64 k] (16 pieces
  // per fp32 row, 8 per bf16 row); rows past vocab / rows are zero-filled.
  auto load_stage = [&](int s, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kBK;
    uint16_t* ws = w_tile(s);
#pragma unroll
    for (int i = 0; i < kTileV * 8 / kThreads; ++i) {
      const int piece = tid + i * kThreads;
      const int r = piece / 8, c = piece % 8;
      const bool valid = v0 + r < vocab;
      cp_async16(ws + r * kWStride + c * 8, valid ? w + (v0 + r) * dim + k0 + c * 8 : w, valid);
    }
    constexpr int kXPieces = kBK * static_cast<int>(sizeof(XT)) / 16;  // per row
    XT* xs = x_tile(s);
#pragma unroll
    for (int i = 0; i < kTileM * kXPieces / kThreads; ++i) {
      const int piece = tid + i * kThreads;
      const int r = piece / kXPieces, c = piece % kXPieces;
      constexpr int kElems = 16 / static_cast<int>(sizeof(XT));
      const bool valid = m0 + r < rows;
      cp_async16(xs + r * kXStride + c * kElems, valid ? x + (m0 + r) * dim + k0 + c * kElems : x,
                 valid);
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[mt][nt][e] = 0.0f;
    }
  }
  // Activation-row tiles of this warp that hold a row (warp-uniform).
  const int64_t warp_m0 = m0 + wm * 32;
  const int live_nt = warp_m0 >= rows ? 0 : static_cast<int>((rows - warp_m0 + 7) / 8);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < nk) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();
    const int s = kt % kStages;
    const uint16_t* ws = w_tile(s);
    const XT* xs = x_tile(s);
    if (live_nt > 0) {
#pragma unroll
      for (int k16 = 0; k16 < kBK / 16; ++k16) {
        // A: the warp's two 16-row vocabulary tiles (ldmatrix.x4: lane l addresses row
        // l % 8 + 8 * ((l / 8) & 1), k column 8 * (l / 16)).
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int r = wv * 32 + mt * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
          ldsm_x4(smem_u32(ws + r * kWStride + k16 * 16 + 8 * (lane >> 4)), a[mt]);
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          if (nt >= live_nt) break;
          // B: x row n = g of the 8-row tile, k pairs (2q, 2q + 1) and (2q + 8, 2q + 9).
          const XT* xr = xs + (wm * 32 + nt * 8 + g) * kXStride + k16 * 16 + 2 * q;
          const Pieces b0 = pieces_of(xr), b1 = pieces_of(xr + 8);
#pragma unroll
          for (int pc = kPiecesUsed - 1; pc >= 0; --pc) {  // lo, mid, hi
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
              mma_bf16(acc[mt][nt], a[mt], b0.w[pc], b1.w[pc]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // C fragment: c0, c1 at (vocabulary row g, activation rows 2q, 2q + 1), c2, c3 at row g + 8.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t v = v0 + wv * 32 + mt * 16 + g + 8 * (e >> 1);
        const int64_t m = warp_m0 + nt * 8 + 2 * q + (e & 1);
        if (v < vocab && m < rows) out[m * out_stride + v] = acc[mt][nt][e];
      }
    }
  }
}

template <typename XT>
void launch(const LmHeadParams& p, int64_t stride, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<XT>();
  DI_CUDA_CHECK(cudaFuncSetAttribute(lm_head_tc_kernel<XT>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>((p.vocab + kTileV - 1) / kTileV),
                  static_cast<unsigned>((p.rows + kTileM - 1) / kTileM));
  cuda_detail::launch_pdl(lm_head_tc_kernel<XT>, grid, kThreads, static_cast<size_t>(kSmem), stream,
                          static_cast<const XT*>(p.x), p.weight, p.logits, p.rows, p.vocab, p.dim,
                          stride);
}

}  // namespace

void lm_head_tensor_core(const LmHeadParams& p, cudaStream_t stream) {
  const int64_t stride = lm_head_detail::checked_stride("lm_head_tensor_core", p);
  DI_CHECK(p.dim % kBK == 0, "lm_head_tensor_core: dim {} is not a multiple of {}", p.dim, kBK);
  if (p.rows == 0) return;
  DI_CHECK(
      reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.weight) % 16 == 0,
      "lm_head_tensor_core: x and weight must be 16-byte aligned");
  DI_CHECK(p.rows <= int64_t{65535} * kTileM, "lm_head_tensor_core: {} rows is too many", p.rows);
  if (p.x_precision == ActPrecision::kBF16) {
    launch<uint16_t>(p, stride, stream);
  } else {
    launch<float>(p, stride, stream);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
