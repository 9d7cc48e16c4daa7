#pragma once

// The sm_90a FP8 block-scaled GEMM for m > 256 (prefill): persistent 128 x 128 tiles.
//
// One CTA per multiprocessor (or per tile, if fewer) walks the tiles blockIdx.x, blockIdx.x +
// gridDim.x, ... in a grouped order (kPrefillGroupM m-tiles for each n-tile, then the next), so
// the tiles in flight at once share their activation rows and weight columns in L2. CTA = one
// producer warpgroup (one thread issues the bulk tensor copies, through every tile of the CTA
// without a pause: the next tile's first stages load while the consumers store the last one) +
// two consumer warpgroups of 64 rows x 128 columns each.
//
// Scales: each consumer thread reads, one stage ahead, the scale bytes of that stage straight
// from global memory (L1/L2 resident): the 128 / B bytes of its two activation rows and of the
// tile's 128 / B weight-block rows (the same for the whole warp), one 32-bit load each where the
// rows are 4-byte aligned (B = 32, num_kb % 4 == 0), else byte loads. No per-tile shared-memory
// table, no barrier, and no load latency in the K loop.
//
// Per element the arithmetic is the other fp8_gemm kernels': for each K-block kb, the k32
// wgmmas of that block into a fresh partial (scale-d = 0 first), then acc = fma(partial,
// s_x[row, kb] * s_w[col / B, kb], acc) in K order; with K-chunks (kFold) each chunk's sum starts
// at 0 and total = c0, total = total + c1, ... So a row's output is bitwise the same whatever m,
// the tile order or the kernel.

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_launch.h"
#include "kernels/cuda/fp8_gemm/sm90_primitives.cuh"
#include "kernels/cuda/fp8_gemm/wgmma_e4m3.cuh"

namespace di::fp8_sm90 {

inline constexpr int kPrefillGroupM = 8;  // m-tiles walked per n-tile (L2 reuse of the weight)

// Tile t of the grouped order -> (m-tile, n-tile).
__device__ __forceinline__ void prefill_tile_coords(int t, int grid_m, int grid_n, int& tm,
                                                    int& tn) {
  const int per_group = kPrefillGroupM * grid_n;
  const int g = t / per_group;
  const int r = t - g * per_group;
  const int gm = min(kPrefillGroupM, grid_m - g * kPrefillGroupM);
  tm = g * kPrefillGroupM + r % gm;
  tn = r / gm;
}

// The scale bytes of one K-stage a consumer thread needs, each row's kKb K-blocks packed
// little-endian into a word (byte kk = K-block it * kKb + kk; 0 for a missing row or K-block):
// its two activation rows and the tile's kScaleCols weight-block rows.
template <int kKb, int kScaleCols>
struct StageScales {
  uint32_t a0, a1;
  uint32_t w[kScaleCols];
};

template <int kKb, int kScaleCols>
__device__ __forceinline__ StageScales<kKb, kScaleCols> load_stage_scales(
    const uint8_t* sa0, const uint8_t* sa1, const uint8_t* const (&sw)[kScaleCols], bool have0,
    bool have1, const bool (&sw_have)[kScaleCols], bool words, int it, int num_kb) {
  StageScales<kKb, kScaleCols> r;
  const int kb0 = it * kKb;
  if (kKb == 4 && words && kb0 + 4 <= num_kb) {  // warp-uniform: one 32-bit load per row
    const auto ld = [&](const uint8_t* p, bool have) {
      return have ? __ldg(reinterpret_cast<const uint32_t*>(p + kb0)) : 0u;
    };
    r.a0 = ld(sa0, have0);
    r.a1 = ld(sa1, have1);
#pragma unroll
    for (int c = 0; c < kScaleCols; ++c)
      r.w[c] = ld(sw[c], sw_have[c]);
  } else {
    r.a0 = load_scale_bytes<kKb>(sa0, have0, kb0, num_kb);
    r.a1 = load_scale_bytes<kKb>(sa1, have1, kb0, num_kb);
#pragma unroll
    for (int c = 0; c < kScaleCols; ++c)
      r.w[c] = load_scale_bytes<kKb>(sw[c], sw_have[c], kb0, num_kb);
  }
  return r;
}

// The epilogue of a tile inside the output (every row and column valid, n even): the thread's
// column pairs of rows `row` and row + 8 as 4- (bf16) or 8-byte (fp32) stores, no bounds checks.
template <int kBlockN, typename OutT>
__device__ __forceinline__ void store_full_tile(OutT* out, int n,
                                                const float (&acc)[WgmmaE4m3<kBlockN>::kRegs],
                                                int n0, int row, int lane) {
  OutT* p0 = out + static_cast<int64_t>(row) * n + n0 + 2 * (lane % 4);
  OutT* p1 = p0 + 8 * static_cast<int64_t>(n);
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    if constexpr (sizeof(OutT) == 4) {
      *reinterpret_cast<float2*>(p0 + 8 * j) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(p1 + 8 * j) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    } else {
      *reinterpret_cast<__nv_bfloat162*>(p0 + 8 * j) =
          __floats2bfloat162_rn(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<__nv_bfloat162*>(p1 + 8 * j) =
          __floats2bfloat162_rn(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}

template <int kBlock, int kStages, typename OutT, bool kFold>
__global__ void __launch_bounds__(384, 1)
    fp8_gemm_sm90_prefill_kernel(const __grid_constant__ CUtensorMap map_a,
                                 const __grid_constant__ CUtensorMap map_b, const Sm90Args args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  constexpr int kBlockM = 128;
  constexpr int kBlockN = 128;
  constexpr int kStageA = kBlockM * kStageK;
  constexpr int kStageB = kBlockN * kStageK;
  constexpr int kKb = kStageK / kBlock;         // K-blocks per stage
  constexpr int kScaleCols = kBlockN / kBlock;  // weight-block rows per tile
  using Mma = WgmmaE4m3<kBlockN>;
  constexpr int kRegs = Mma::kRegs;

  extern __shared__ uint8_t smem_raw[];
  const StageRing ring = carve_stage_ring<kStages, kStageA, kStageB>(smem_raw);
  uint64_t* const full = ring.full;
  uint64_t* const empty = ring.empty;
  // B = 32 with K-chunks: the consumer threads' chunk totals, [16][256] float4 (thread-private
  // columns; the registers hold the second partial instead).
  const uint32_t tot_addr = (smem_addr(ring.tail) + 15u) & ~15u;

  const int grid_m = (args.m + kBlockM - 1) / kBlockM;
  const int grid_n = (args.n + kBlockN - 1) / kBlockN;
  const int tiles = grid_m * grid_n;
  const int ns = args.num_k_stages;

  if (threadIdx.x == 0) init_stage_ring<kStages>(ring, 8, &map_a, &map_b);  // 8 consumer warps
  __syncthreads();

  if (threadIdx.x < 128) {
    // Producer: a ring of kStages stages through all of this CTA's tiles.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      const uint32_t tx = args.a_stage_bytes + kStageB;
      uint32_t g = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        prefill_tile_coords(t, grid_m, grid_n, tm, tn);
        for (int it = 0; it < ns; ++it, ++g) {
          const uint32_t s = g % kStages;
          if (g >= kStages) mbar_wait(&empty[s], ((g / kStages) - 1) & 1);
          mbar_arrive_expect_tx(&full[s], tx);
          tma_load_2d(ring.b + s * kStageB, &map_b, &full[s], it * kStageK, tn * kBlockN);
          tma_load_2d(ring.a + s * kStageA, &map_a, &full[s], it * kStageK, tm * kBlockM);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int consumer = threadIdx.x / 128 - 1;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int row0 = consumer * 64 + warp * 16 + lane / 4;  // this thread's rows: row0, row0 + 8
  [[maybe_unused]] const int ct = threadIdx.x - 128;      // consumer thread 0..255
  const uint32_t a_off = static_cast<uint32_t>(consumer * 64 * kStageK);
  // 32-bit scale loads: every row base 4-byte aligned (num_kb % 4 == 0 and aligned bases).
  const bool words = (args.num_kb % 4) == 0 &&
                     (reinterpret_cast<uintptr_t>(args.act_scale) % 4) == 0 &&
                     (reinterpret_cast<uintptr_t>(args.weight_scale) % 4) == 0;

  uint32_t g = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    prefill_tile_coords(t, grid_m, grid_n, tm, tn);
    const int m0 = tm * kBlockM;
    const int n0 = tn * kBlockN;
    const int64_t grow0 = static_cast<int64_t>(m0) + row0;
    const uint8_t* sa_row0 = args.act_scale + grow0 * args.num_kb;
    const uint8_t* sa_row1 = sa_row0 + 8 * static_cast<int64_t>(args.num_kb);
    const bool have0 = grow0 < args.m;
    const bool have1 = grow0 + 8 < args.m;
    const uint8_t* sw_rows[kScaleCols];  // const after the loop below
    bool sw_have[kScaleCols];
#pragma unroll
    for (int c = 0; c < kScaleCols; ++c) {
      const int r = n0 / kBlock + c;
      sw_have[c] = r < args.scale_rows;
      sw_rows[c] = args.weight_scale + static_cast<int64_t>(r) * args.num_kb;
    }
    // The scale words of stage 0; each stage loads the next stage's.
    const auto load = [&](int it) {
      return load_stage_scales<kKb, kScaleCols>(sa_row0, sa_row1, sw_rows, have0, have1, sw_have,
                                                words, it, args.num_kb);
    };
    StageScales<kKb, kScaleCols> next = load(0);

    float acc[kRegs];
#pragma unroll
    for (int i = 0; i < kRegs; ++i)
      acc[i] = 0.0f;
    // B = 32 pipelines the K-blocks of a stage one deep: K-block kk + 1's wgmma is issued into
    // the other partial before kk is waited for and promoted, so the tensor core works during
    // the promotion. (The K-chunk totals live in shared memory, which leaves the registers for
    // the second partial.)
    // (B = 128 has one K-block a stage: nothing to pipeline, and its totals stay in registers.)
    constexpr bool kPipe = kKb > 1;
    constexpr bool kTotSmem = kFold && kPipe;
    [[maybe_unused]] int chunk_end = args.chunk_stages;  // the stage after this K-chunk
    [[maybe_unused]] float tot[kFold && !kTotSmem ? kRegs : 1];
    float part[kPipe ? 2 : 1][kRegs];

    // One stage (it, ring slot gg). issued0: its first K-block's wgmma is in flight already;
    // cross: issue the next stage's first K-block before promoting this stage's last one. A
    // wgmma in flight across the loop's back edge makes ptxas serialise every wgmma (C7514), so
    // the stages run in pairs, the first crossing into the second, and the pipeline drains at
    // each pair's end.
    const auto stage = [&](int it, uint32_t gg, auto issued0, auto cross) {
      const StageScales<kKb, kScaleCols> cur = next;
      if (it + 1 < ns) next = load(it + 1);
      const uint32_t s = gg % kStages;
      if constexpr (!decltype(issued0)::value) mbar_wait(&full[s], (gg / kStages) & 1);
      const uint64_t desc_a = smem_desc_k128_sw128(ring.a + s * kStageA + a_off);
      const uint64_t desc_b = smem_desc_k128_sw128(ring.b + s * kStageB);
      const auto issue = [&](int kk, float(&d)[kRegs]) {
        wgmma_fence();
        mma_kblock<Mma, kBlock>(d, desc_a, desc_b, kk);
        wgmma_commit();
      };
      const auto promote = [&](int kk, float(&d)[kRegs]) {
#pragma unroll
        for (int i = 0; i < kRegs; ++i)
          fence_regs(d[i]);
        if (it * kKb + kk >= args.num_kb) return;
        const float sa0 = scale_byte(cur.a0, kk);
        const float sa1 = scale_byte(cur.a1, kk);
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
          const float w = scale_byte(cur.w[(8 * j) / kBlock], kk);
          const float s0 = sa0 * w;  // powers of two: exact
          const float s1 = sa1 * w;
          acc[4 * j + 0] = fmaf(d[4 * j + 0], s0, acc[4 * j + 0]);
          acc[4 * j + 1] = fmaf(d[4 * j + 1], s0, acc[4 * j + 1]);
          acc[4 * j + 2] = fmaf(d[4 * j + 2], s1, acc[4 * j + 2]);
          acc[4 * j + 3] = fmaf(d[4 * j + 3], s1, acc[4 * j + 3]);
        }
      };
      if constexpr (kPipe) {
        if constexpr (!decltype(issued0)::value) issue(0, part[0]);
#pragma unroll
        for (int kk = 0; kk < kKb; ++kk) {
          if (kk + 1 < kKb) {
            issue(kk + 1, part[(kk + 1) & 1]);
            wgmma_wait<1>();
          } else if constexpr (decltype(cross)::value) {
            // The next stage's first K-block, before this stage's last one is promoted.
            const uint32_t s1 = (gg + 1) % kStages;
            mbar_wait(&full[s1], ((gg + 1) / kStages) & 1);
            wgmma_fence();
            mma_kblock<Mma, kBlock>(part[0], smem_desc_k128_sw128(ring.a + s1 * kStageA + a_off),
                                    smem_desc_k128_sw128(ring.b + s1 * kStageB), 0);
            wgmma_commit();
            wgmma_wait<1>();
          } else {
            wgmma_wait<0>();
          }
          if (kk + 1 == kKb) {  // every wgmma reading stage s has completed
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
          }
          promote(kk, part[kk & 1]);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < kKb; ++kk) {
          issue(kk, part[0]);
          wgmma_wait<0>();
          promote(kk, part[0]);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
      }

      if constexpr (kFold && !kTotSmem) {
        // End of a K-chunk: total = c0, then total = total + c (fixed order), acc restarts at 0.
        // (it % chunk_stages, not the counters below: with them this variant's registers spill.)
        if ((it + 1) % args.chunk_stages == 0 || it + 1 == ns) {
          const bool first = it < args.chunk_stages;
#pragma unroll
          for (int i = 0; i < kRegs; ++i) {
            tot[i] = first ? acc[i] : tot[i] + acc[i];
            acc[i] = 0.0f;
          }
        }
      } else if constexpr (kFold) {
        // The same in shared memory (counters, not it % chunk_stages: no integer division).
        if (it + 1 == chunk_end || it + 1 == ns) {
          const bool first = chunk_end == args.chunk_stages;
#pragma unroll
          for (int q = 0; q < kRegs / 4; ++q) {
            const uint32_t a = tot_addr + 16u * static_cast<uint32_t>(q * 256 + ct);
            float4 v = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
            if (!first) {
              const float4 t = lds_f32x4(a);
              v = make_float4(t.x + v.x, t.y + v.y, t.z + v.z, t.w + v.w);
            }
            sts_f32x4(a, v);
          }
#pragma unroll
          for (int i = 0; i < kRegs; ++i)
            acc[i] = 0.0f;
          chunk_end += args.chunk_stages;
        }
      }
    };
    using No = std::false_type;
    using Yes = std::true_type;
    int it = 0;
    if constexpr (kPipe) {
      for (; it + 1 < ns; it += 2, g += 2) {
        stage(it, g, No{}, Yes{});
        stage(it + 1, g + 1, Yes{}, No{});
      }
    }
    for (; it < ns; ++it, ++g)
      stage(it, g, No{}, No{});
    if constexpr (kFold && !kTotSmem) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i)
        acc[i] = tot[i];
    } else if constexpr (kFold) {
#pragma unroll
      for (int q = 0; q < kRegs / 4; ++q) {
        const float4 t = lds_f32x4(tot_addr + 16u * static_cast<uint32_t>(q * 256 + ct));
        acc[4 * q] = t.x;
        acc[4 * q + 1] = t.y;
        acc[4 * q + 2] = t.z;
        acc[4 * q + 3] = t.w;
      }
    }
    if (m0 + kBlockM <= args.m && n0 + kBlockN <= args.n && args.n % 2 == 0) {
      store_full_tile<kBlockN>(static_cast<OutT*>(args.out), args.n, acc, n0, m0 + row0, lane);
    } else {
      store_tile<kBlockN>(static_cast<OutT*>(args.out), args, acc, n0, m0 + row0, lane);
    }
  }
#endif
}

}  // namespace di::fp8_sm90
