// Routed-expert FFN on the GPU (kernels/params/moe.h), decode regime: the FP4 expert weights are
// streamed once per step at close to HBM speed, every tile of <= 8 pairs of an expert reads its
// expert's weights once.
//
// moe_expert_gemm: grid (128-row slices of the mats * n output columns, expert tiles). A CTA
//   loads its tile's activation rows (e4m3, gathered through pair_index for w1/w3) and their
//   scales into shared memory once; each of its 4 warps then owns 32 weight rows and streams them
//   through its own 6-stage cp.async ring (128 K-columns = 4 scale blocks = 2 KiB per stage, no
//   CTA barrier in the loop). Hopper has no FP4 tensor cores; an e2m1 nibble becomes an e4m3 byte
//   with two shifts and masks: sign to bit 7, the three magnitude bits to bits 4..2 — that byte is
//   the e2m1 value times 2^-6 exactly (normal and subnormal codes alike), and 2^6 goes into the
//   scale. The even and odd nibbles of a byte land in different registers, so the tensor-core K
//   order inside a 32-block is permuted; the activations are stored in shared memory with the same
//   permutation (bytes 0 2 4 6 1 3 5 7 of every 8), which leaves every 32-block's dot product
//   unchanged. Per 32-block: mma.sync m16n8k32 e4m3 from zero (exact inputs), then promoted into
//   the fp32 accumulator as (partial * 2^(e_w + 6)) * 2^(e_x) in ascending block order — no
//   dependence on the other pairs of the tile (batch-invariant rows).
// moe_expert_tiles: one CTA scans the per-expert pair counts (CUB block scan) into tiles.
// moe_swiglu_quant: 8 lanes per 32-block; the CPU's element arithmetic, then act_quant.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/moe/moe_expert.cuh"
#include "kernels/cuda/ops/device_common.cuh"

namespace di {
namespace {

using cuda_detail::cp_async16;
using cuda_detail::cp_async_commit;
using cuda_detail::cp_async_wait;

constexpr int kWarps = 4;
constexpr int kWarpRows = 32;  // two m16 tiles per warp
constexpr int kCtaRows = kWarps * kWarpRows;
constexpr int kStageCols = 128;                          // K columns per stage: 4 blocks of 32
constexpr int kStageBytes = kWarpRows * kStageCols / 2;  // 2 KiB of e2m1 codes
constexpr int kStages = 6;
constexpr int kTok = kMoeTileTokens;
constexpr int kTilesThreads = 1024;
constexpr int64_t kMaxK = 12288;

// Activation row stride in shared memory: an odd multiple of 32 bytes, so that the 8 tokens'
// 8-byte fragment loads of one block fall in distinct bank pairs (two wavefronts, the minimum).
__host__ __device__ constexpr int64_t act_stride(int64_t k) {
  return (k / 32) % 2 == 1 ? k : k + 32;
}

__host__ __device__ constexpr int64_t gemm_smem_bytes(int64_t k) {
  const int64_t kb = k / 32;
  return int64_t{kWarps} * kStages * kStageBytes + kTok * act_stride(k) + kTok * kb +
         int64_t{kWarps} * kWarpRows * kb;
}

// e4m3 bytes (value * 2^-6) of the even / odd nibbles of 4 packed e2m1 pairs.
__device__ __forceinline__ uint32_t e2m1_even_to_e4m3(uint32_t x) {
  return ((x << 2) & 0x1C1C1C1Cu) | ((x << 4) & 0x80808080u);
}
__device__ __forceinline__ uint32_t e2m1_odd_to_e4m3(uint32_t x) {
  return ((x >> 2) & 0x1C1C1C1Cu) | (x & 0x80808080u);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_ptr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// d = A(16 x 32 e4m3) * B(32 x 8 e4m3), fp32, from a zero accumulator.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// Byte offset of 16-byte chunk c (scale block c of the stage) of ring row r: swizzled so that
// ldmatrix's 8 row addresses of one block hit 8 different bank groups.
__device__ __forceinline__ int ring_offset(int r, int c) {
  return r * (kStageCols / 2) + ((c ^ ((r >> 1) & 3)) << 4);
}

__global__ void __launch_bounds__(kWarps * 32, 2)
    moe_expert_gemm_kernel(const MoeExpertGemmParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const MoeExpertTile tile = p.tiles[blockIdx.y];
  if (tile.expert < 0) return;  // uniform over the CTA
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int kb = static_cast<int>(p.k / 32);
  const int64_t stride = act_stride(p.k);
  uint8_t* ring = smem + warp * kStages * kStageBytes;
  uint8_t* act = smem + kWarps * kStages * kStageBytes;
  uint8_t* sx = act + kTok * stride;
  uint8_t* sw = sx + kTok * kb + warp * kWarpRows * kb;

  const int64_t out_cols = p.mats * p.n;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kCtaRows + warp * kWarpRows;
  const bool active = col0 < out_cols;
  const uint8_t* wcodes = nullptr;
  const uint8_t* wscales = nullptr;
  const int64_t row_bytes = p.k / 2;
  const int nstages = (kb + 3) / 4;
  auto issue = [&](int s) {
    uint8_t* dst = ring + (s % kStages) * kStageBytes;
#pragma unroll
    for (int i = 0; i < kStageBytes / 16 / 32; ++i) {
      const int q = lane + 32 * i;
      const int r = q >> 2, c = q & 3;
      const int blk = s * 4 + c;
      const bool valid = blk < kb;
      cp_async16(dst + ring_offset(r, c), wcodes + r * row_bytes + (valid ? blk * 16 : 0), valid);
    }
  };
  if (active) {
    const int64_t mat = col0 / p.n, row0 = col0 - mat * p.n;
    const Fp4ExpertMatrix m = p.weights[mat * p.experts + tile.expert];
    wcodes = m.codes + row0 * row_bytes;
    wscales = m.scales + row0 * kb;
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < nstages) issue(s);
      cp_async_commit();
    }
  }

  // The tile's activations (absent tokens zero, scale 2^0), permuted per 8 bytes: 0 2 4 6 1 3 5 7.
  const int64_t chunks = p.k / 16;
  for (int64_t q = threadIdx.x; q < kTok * chunks; q += blockDim.x) {
    const int t = static_cast<int>(q / chunks);
    const int64_t c = q - t * chunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (t < tile.count) {
      const int64_t pair = tile.first_pair + t;
      const int64_t arow = p.pair_index != nullptr ? p.pair_index[pair] / p.topk : pair;
      v = __ldg(reinterpret_cast<const uint4*>(p.xq + arow * p.k) + c);
    }
    const uint4 o = make_uint4(__byte_perm(v.x, v.y, 0x6420), __byte_perm(v.x, v.y, 0x7531),
                               __byte_perm(v.z, v.w, 0x6420), __byte_perm(v.z, v.w, 0x7531));
    *reinterpret_cast<uint4*>(act + t * stride + c * 16) = o;
  }
  for (int q = static_cast<int>(threadIdx.x); q < kTok * kb; q += blockDim.x) {
    const int t = q / kb;
    uint8_t s = 127;
    if (t < tile.count) {
      const int64_t pair = tile.first_pair + t;
      const int64_t arow = p.pair_index != nullptr ? p.pair_index[pair] / p.topk : pair;
      s = p.xq_scale[arow * kb + (q - t * kb)];
    }
    sx[q] = s;
  }
  // The warp's 32 rows of weight scales: one contiguous run of 32 * kb bytes (4-byte aligned).
  if (active) {
    const auto* src = reinterpret_cast<const uint32_t*>(wscales);
    auto* dst = reinterpret_cast<uint32_t*>(sw);
    for (int q = lane; q < kWarpRows * kb / 4; q += 32)
      dst[q] = __ldg(src + q);
  }
  __syncthreads();
  if (!active) return;

  const int g = lane >> 2, t4 = lane & 3;
  const int lm_row = ((lane >> 3) & 1) * 8 + (lane & 7), lm_blk = lane >> 4;
  float acc[2][4] = {};
  for (int s = 0; s < nstages; ++s) {
    cp_async_wait<kStages - 2>();
    __syncwarp();
    const uint8_t* st = ring + (s % kStages) * kStageBytes;
    const int nb = min(4, kb - s * 4);
#pragma unroll
    for (int bp = 0; bp < 2; ++bp) {
      if (2 * bp >= nb) break;
      uint32_t w[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = mt * 16 + lm_row;
        ldmatrix_x4(w[mt], st + ring_offset(r, 2 * bp + lm_blk));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (2 * bp + h >= nb) break;
        const int blk = s * 4 + 2 * bp + h;
        const uint2 b = *reinterpret_cast<const uint2*>(act + g * stride + blk * 32 + t4 * 8);
        const float sx0 = __uint_as_float(static_cast<uint32_t>(sx[2 * t4 * kb + blk]) << 23);
        const float sx1 = __uint_as_float(static_cast<uint32_t>(sx[(2 * t4 + 1) * kb + blk]) << 23);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const uint32_t lo = w[mt][2 * h], hi = w[mt][2 * h + 1];
          const uint32_t a[4] = {e2m1_even_to_e4m3(lo), e2m1_even_to_e4m3(hi), e2m1_odd_to_e4m3(lo),
                                 e2m1_odd_to_e4m3(hi)};
          float d[4];
          mma_e4m3(d, a, b.x, b.y);
          // 2^(e_w - 127) * 2^6 = the float with exponent field e_w + 6.
          const float sw0 =
              __uint_as_float((static_cast<uint32_t>(sw[(mt * 16 + g) * kb + blk]) + 6) << 23);
          const float sw1 =
              __uint_as_float((static_cast<uint32_t>(sw[(mt * 16 + g + 8) * kb + blk]) + 6) << 23);
          acc[mt][0] = fmaf(d[0] * sw0, sx0, acc[mt][0]);
          acc[mt][1] = fmaf(d[1] * sw0, sx1, acc[mt][1]);
          acc[mt][2] = fmaf(d[2] * sw1, sx0, acc[mt][2]);
          acc[mt][3] = fmaf(d[3] * sw1, sx1, acc[mt][3]);
        }
      }
    }
    __syncwarp();
    if (s + kStages - 1 < nstages) issue(s + kStages - 1);
    cp_async_commit();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = 2 * t4 + (i & 1);
      if (t >= tile.count) continue;
      const int64_t col = col0 + mt * 16 + g + (i >> 1) * 8;
      const int64_t o = (tile.first_pair + t) * out_cols + col;
      if (p.precision == ActPrecision::kF32) {
        ops_detail::store1(static_cast<float*>(p.out) + o, acc[mt][i]);
      } else {
        ops_detail::store1(static_cast<uint16_t*>(p.out) + o, acc[mt][i]);
      }
    }
  }
}

__global__ void __launch_bounds__(kTilesThreads)
    moe_expert_tiles_kernel(const MoeExpertTilesParams p, int64_t bound) {
  using Scan = cub::BlockScan<int, kTilesThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int total;
  const int e = static_cast<int>(threadIdx.x);
  int count = 0, first = 0;
  if (e < p.experts) {
    first = p.offsets[e];
    count = max(0, p.offsets[e + 1] - first);
  }
  const int n = (count + kTok - 1) / kTok;
  int base = 0;
  Scan(scan_tmp).ExclusiveSum(n, base);
  for (int j = 0; j < n && base + j < bound; ++j) {
    MoeExpertTile t;
    t.expert = e;
    t.first_pair = first + j * kTok;
    t.count = min(kTok, count - j * kTok);
    p.tiles[base + j] = t;
  }
  if (e == kTilesThreads - 1) total = base + n;
  __syncthreads();
  for (int64_t i = total + e; i < bound; i += kTilesThreads)
    p.tiles[i] = MoeExpertTile{};
}

template <typename S>
__global__ void __launch_bounds__(256) moe_swiglu_quant_kernel(const MoeSwigluQuantParams p) {
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
  *reinterpret_cast<uint32_t*>(p.codes + pair * p.inter + j) = e4m3x4(q);
  if ((threadIdx.x & 7) == 0) p.scales[pair * (p.inter / 32) + j / 32] = static_cast<uint8_t>(byte);
}

}  // namespace

int64_t moe_expert_tile_bound(int32_t experts, int64_t pairs) {
  DI_CHECK(experts > 0 && pairs >= 0, "moe_expert_tile_bound: experts {} pairs {}", experts, pairs);
  // sum_e ceil(c_e / 8) <= (pairs + 7 * active experts) / 8, active <= min(experts, pairs).
  const int64_t active = std::min<int64_t>(experts, pairs);
  return (pairs + (kTok - 1) * active + kTok - 1) / kTok;
}

void moe_expert_tiles(const MoeExpertTilesParams& p, cudaStream_t stream) {
  DI_CHECK(p.experts > 0 && p.experts <= kTilesThreads,
           "moe_expert_tiles: experts {} (1..{} supported)", p.experts, kTilesThreads);
  DI_CHECK(p.pairs >= 0 && p.pairs <= INT32_MAX, "moe_expert_tiles: pairs {}", p.pairs);
  DI_CHECK(p.offsets != nullptr && p.tiles != nullptr, "moe_expert_tiles: null offsets or tiles");
  const int64_t bound = moe_expert_tile_bound(p.experts, p.pairs);
  if (bound == 0) return;
  moe_expert_tiles_kernel<<<1, kTilesThreads, 0, stream>>>(p, bound);
  DI_CUDA_CHECK(cudaGetLastError());
}

void moe_expert_gemm(const MoeExpertGemmParams& p, cudaStream_t stream) {
  DI_CHECK(p.mats == 1 || p.mats == 2, "moe_expert_gemm: mats {} (1 or 2)", p.mats);
  DI_CHECK(p.n > 0 && p.n % 32 == 0, "moe_expert_gemm: n {} must be a positive multiple of 32",
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
  const int64_t bound = moe_expert_tile_bound(p.experts, p.pairs);
  DI_CHECK(p.tile_count >= bound && p.tile_count <= 65535,
           "moe_expert_gemm: tile_count {} (need {} for {} pairs over {} experts, <= 65535)",
           p.tile_count, bound, p.pairs, p.experts);
  const int64_t smem = gemm_smem_bytes(p.k);
  DI_CUDA_CHECK(cudaFuncSetAttribute(
      moe_expert_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((p.mats * p.n + kCtaRows - 1) / kCtaRows),
                  static_cast<unsigned>(p.tile_count));
  moe_expert_gemm_kernel<<<grid, kWarps * 32, static_cast<size_t>(smem), stream>>>(p);
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
    moe_swiglu_quant_kernel<float><<<blocks, 256, 0, stream>>>(p);
  } else {
    moe_swiglu_quant_kernel<uint16_t><<<blocks, 256, 0, stream>>>(p);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
