#pragma once

// The sm_90a FP8 block-scaled GEMM kernel: y[m, n] = sum_kb P_kb[m, n] * s_x[m, kb] * s_w[n/B, kb]
// where P_kb is the e4m3 x e4m3 partial product of K-block kb from wgmma (fp32 accumulators).
// This file: the 64-row tiles of 64 < m <= 256 (split-K over a cluster); m <= 64 is the swapped
// kernel (fp8_gemm_sm90_swap.cuh), m > 256 the persistent one (fp8_gemm_sm90_prefill.cuh).
//
// CTA = one producer warpgroup (one thread issues the bulk tensor copies) + one consumer warpgroup
// owning 64 rows x kBlockN columns, one CTA per K-chunk of a 1 x 1 x chunks cluster. A stage holds
// 128 K-columns of the quantised activations [block_m x 128] and of the weight [kBlockN x 128]
// (both 128-byte swizzled, K-major); full/empty mbarriers per stage. The activation scales (ue8m0
// bytes [m, num_kb]) are read per thread, the weight scales of the tile once into shared memory.
//
// Per K-block the consumer issues the k32 wgmmas of that block into a fresh partial (scale-d = 0
// on the first), waits, and promotes: acc = fma(partial, s_x * s_w, acc). That order is the same
// for every tile configuration and every m, so a row's output is independent of the batch.

#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_launch.h"
#include "kernels/cuda/fp8_gemm/sm90_primitives.cuh"
#include "kernels/cuda/fp8_gemm/wgmma_e4m3.cuh"

namespace di::fp8_sm90 {

constexpr int kStageK = 128;  // K-columns per pipeline stage (one 128-byte swizzle row)

template <int kBlockN, int kBlock, int kStages>
struct Sm90Config {
  static constexpr int kBlockM = 64;
  static constexpr int kThreads = 256;
  static constexpr int kKbPerStage = kStageK / kBlock;
  static constexpr int kStageA = kBlockM * kStageK;
  static constexpr int kStageB = kBlockN * kStageK;
  static constexpr int kScaleCols = kBlockN >= kBlock ? kBlockN / kBlock : 1;  // weight blocks/tile
  static constexpr int kTileN = kBlockN;
  static constexpr int kPipeStages = kStages;
};

__device__ __forceinline__ float ue8m0_to_float(uint8_t b) {
  // Scale bytes 1..254 (0 and 255 are not produced by the checkpoint converter).
  return __uint_as_float(static_cast<uint32_t>(b) << 23);
}

template <typename OutT>
__device__ __forceinline__ void store_pair(OutT* out, int64_t row, int col, int n, float a,
                                           float b) {
  OutT* p = out + row * n + col;
  if constexpr (sizeof(OutT) == 4) {
    if (col + 1 < n && (n % 2) == 0) {
      *reinterpret_cast<float2*>(p) = make_float2(a, b);
    } else {
      p[0] = a;
      if (col + 1 < n) p[1] = b;
    }
  } else {
    if (col + 1 < n && (n % 2) == 0) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
    } else {
      p[0] = __float2bfloat16_rn(a);
      if (col + 1 < n) p[1] = __float2bfloat16_rn(b);
    }
  }
}

template <int kBlockN, typename OutT>
__device__ __forceinline__ void store_tile(OutT* out, const Sm90Args& args,
                                           const float (&acc)[WgmmaE4m3<kBlockN>::kRegs], int n0,
                                           int row, int lane) {
  const int64_t r0 = row;
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= args.n) continue;
    if (r0 < args.m) store_pair(out, r0, col, args.n, acc[4 * j], acc[4 * j + 1]);
    if (r0 + 8 < args.m) store_pair(out, r0 + 8, col, args.n, acc[4 * j + 2], acc[4 * j + 3]);
  }
}

// K-blocks kb0 .. kb0 + kKb - 1 of the scale row p packed little-endian into a word (byte kk =
// K-block kb0 + kk; 0 for a missing row or a K-block past num_kb), one byte load each.
template <int kKb>
__device__ __forceinline__ uint32_t load_scale_bytes(const uint8_t* p, bool have, int kb0,
                                                     int num_kb) {
  uint32_t w = 0;
#pragma unroll
  for (int kk = 0; kk < kKb; ++kk) {
    if (have && kb0 + kk < num_kb) w |= static_cast<uint32_t>(__ldg(p + kb0 + kk)) << (8 * kk);
  }
  return w;
}

// Byte kk of a packed scale word as the ue8m0 scale it encodes (0 -> 0.0f).
__device__ __forceinline__ float scale_byte(uint32_t w, int kk) {
  return __uint_as_float(((w >> (8 * kk)) & 0xffu) << 23);
}

// Split-K combine inside the cluster (decode). Every consumer thread parks its chunk partial
// (kRegs values at park[i * 128 + slot], slot unique per consumer thread, 128-strided per
// warpgroup) in its CTA's (now idle) pipeline shared memory; after a cluster barrier, rank 0 forms
// total = c0, total = total + c1, ... in chunk order (the same fp32 adds as the prefill fold) into
// `acc` (the remote loads of several ranks in flight together), and a second barrier keeps the
// other CTAs' shared memory alive until then. Every thread of every CTA (producer included) calls
// this exactly once; it returns true for the consumer threads of rank 0, which then store `acc`.
// kConsumerThreads: consumer threads per CTA (they sync on named barrier 1 before overwriting the
// pipeline buffers).
template <int kRegs, int kConsumerThreads>
__device__ __forceinline__ bool cluster_chunk_sum(float* acc, bool consumer, float* park) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  // One K-chunk (cluster-uniform): nothing to combine, no cluster barrier.
  if (cluster.num_blocks() == 1) return consumer;
  if (consumer) {
    // The last stage's wgmmas of the other warps may still read the pipeline buffers.
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
#pragma unroll
    for (int i = 0; i < kRegs; ++i)
      park[i * 128] = acc[i];
  }
  cluster.sync();
  const unsigned chunks = cluster.num_blocks();
  const bool mine = consumer && cluster.block_rank() == 0;
  if (mine) {
    // kGroup ranks' partials are loaded before any is added (one remote round trip a group, not
    // one a rank; 32 registers in flight), then added in rank order.
    constexpr int kGroup = kRegs >= 32 ? 1 : 32 / kRegs;
    for (unsigned r0 = 1; r0 < chunks; r0 += kGroup) {
      float v[kGroup][kRegs];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (r0 + g < chunks) {
          const float* remote = cluster.map_shared_rank(park, r0 + g);
#pragma unroll
          for (int i = 0; i < kRegs; ++i)
            v[g][i] = remote[i * 128];
        }
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (r0 + g < chunks) {
#pragma unroll
          for (int i = 0; i < kRegs; ++i)
            acc[i] = acc[i] + v[g][i];
        }
      }
    }
  }
  cluster.sync();
  return mine;
}

// The k32 wgmmas of K-block kk (kBlock / 32 of them, chained from scale-d = 0) of the stage whose
// operand descriptors are desc_a / desc_b, into d; no fence or commit (the caller groups them).
template <typename Mma, int kBlock>
__device__ __forceinline__ void mma_kblock(float* d, uint64_t desc_a, uint64_t desc_b, int kk) {
  constexpr int kMmaPerKb = kBlock / 32;
#pragma unroll
  for (int j = 0; j < kMmaPerKb; ++j) {
    const int k32 = kk * kMmaPerKb + j;  // 32-byte steps: +2 in the >> 4 field
    Mma::mma(d, desc_a + 2 * k32, desc_b + 2 * k32, j == 0 ? 0 : 1);
  }
}

// The consumer loop of the 64 x 128 tiles (64 < m <= 256: one consumer warpgroup, a K-chunk of
// a split cluster; the 128 x 128 prefill tile was not faster so, docs/PERF.md 2026-12-05). The
// tile's N is issued as two n64 halves, each (K-block, half) a wgmma group of its own, pipelined
// one deep within a stage: the next group is issued before this one is waited for, so the tensor
// core works while this half is promoted (before, each K-block waited for its wgmmas and was
// then promoted with the tensor core idle, 4 times a stage at B = 32). Per element the
// arithmetic is unchanged: the same k32 chain from scale-d = 0 (the wgmma result does not depend
// on the instruction's N), the same fma into acc in K order; so rows stay bitwise those of the
// other tiles. On return acc holds the tile's (chunk's) totals.
template <typename Cfg, int kBlock>
__device__ __forceinline__ void consume_halves_pipelined(
    const Sm90Args& args, const uint8_t* s_a, const uint8_t* s_b, uint64_t* full, uint64_t* empty,
    uint32_t sw_addr, int consumer, int lane, int it_begin, int it_end, const uint8_t* sa_row0,
    const uint8_t* sa_row1, bool have0, bool have1, float (&acc)[WgmmaE4m3<Cfg::kTileN>::kRegs]) {
  constexpr int kHalfN = Cfg::kTileN / 2;
  using Half = WgmmaE4m3<kHalfN>;
  constexpr int kHr = Half::kRegs;
  constexpr int kKb = Cfg::kKbPerStage;
  constexpr int kOps = 2 * kKb;  // (K-block, half) groups a stage: even, so half h uses ph[h]
  constexpr int kHalfScales = kHalfN >= kBlock ? kHalfN / kBlock : 1;
  constexpr int kStages = Cfg::kPipeStages;
  float ph[2][kHr];
  const uint8_t* a_rows = s_a + consumer * 64 * kStageK;
  const auto issue = [&](int s, int kk, int h, float(&d)[kHr]) {
    const uint64_t desc_a = smem_desc_k128_sw128(a_rows + s * Cfg::kStageA);
    const uint64_t desc_b = smem_desc_k128_sw128(s_b + s * Cfg::kStageB + h * kHalfN * kStageK);
    wgmma_fence();
    mma_kblock<Half, kBlock>(d, desc_a, desc_b, kk);
    wgmma_commit();
  };

  for (int it = it_begin; it < it_end; ++it) {
    const int li = it - it_begin;
    const int s = li % kStages;
    float sa0v[kKb], sa1v[kKb];
#pragma unroll
    for (int kk = 0; kk < kKb; ++kk) {
      const int kb = min(it * kKb + kk, args.num_kb - 1);
      sa0v[kk] = have0 ? ue8m0_to_float(__ldg(sa_row0 + kb)) : 0.0f;
      sa1v[kk] = have1 ? ue8m0_to_float(__ldg(sa_row1 + kb)) : 0.0f;
    }
    mbar_wait(&full[s], (li / kStages) & 1);
    issue(s, 0, 0, ph[0]);
#pragma unroll
    for (int op = 0; op < kOps; ++op) {
      const int kk = op / 2;
      const int h = op % 2;
      const int kb = it * kKb + kk;
      const int c0 = (h * kHalfN) / kBlock;  // this half's first weight-scale column
      // This half's weight scales, read before the wait so that their latency hides behind it.
      float sw[kHalfScales];
#pragma unroll
      for (int c = 0; c < kHalfScales; ++c)
        sw[c] = lds_f32(sw_addr + 4u * static_cast<uint32_t>((c0 + c) * args.num_kb +
                                                             min(kb, args.num_kb - 1)));
      // Issue the group after this one, then wait for this one only.
      if (op + 1 < kOps) {
        issue(s, (op + 1) / 2, (op + 1) % 2, ph[(op + 1) % 2]);
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
#pragma unroll
      for (int i = 0; i < kHr; ++i)
        fence_regs(ph[h][i]);
      if (op == kOps - 1) {  // every wgmma reading stage s has completed
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
      }
      if (kb < args.num_kb) {
#pragma unroll
        for (int j = 0; j < kHalfN / 8; ++j) {
          const int jg = h * (kHalfN / 8) + j;  // column group in the tile
          const float w = sw[kHalfN >= kBlock ? (8 * jg) / kBlock - c0 : 0];
          const float s0 = sa0v[kk] * w;  // powers of two: exact
          const float s1 = sa1v[kk] * w;
          acc[4 * jg + 0] = fmaf(ph[h][4 * j + 0], s0, acc[4 * jg + 0]);
          acc[4 * jg + 1] = fmaf(ph[h][4 * j + 1], s0, acc[4 * jg + 1]);
          acc[4 * jg + 2] = fmaf(ph[h][4 * j + 2], s1, acc[4 * jg + 2]);
          acc[4 * jg + 3] = fmaf(ph[h][4 * j + 3], s1, acc[4 * jg + 3]);
        }
      }
    }
  }
}

template <int kBlockN, int kBlock, int kStages, typename OutT>
__global__ void __launch_bounds__(256, 1)
    fp8_gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a,
                         const __grid_constant__ CUtensorMap map_b, const Sm90Args args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using Cfg = Sm90Config<kBlockN, kBlock, kStages>;
  using Mma = WgmmaE4m3<kBlockN>;
  constexpr int kRegs = Mma::kRegs;

  extern __shared__ uint8_t smem_raw[];
  const StageRing ring = carve_stage_ring<kStages, Cfg::kStageA, Cfg::kStageB>(smem_raw);
  uint8_t* s_a = ring.a;
  uint8_t* s_b = ring.b;
  uint64_t* full = ring.full;
  uint64_t* empty = ring.empty;
  float* s_sw = reinterpret_cast<float*>(ring.tail);  // [kScaleCols][num_kb]

  const int warpgroup = threadIdx.x / 128;
  const int n0 = blockIdx.x * kBlockN;
  const int m0 = blockIdx.y * Cfg::kBlockM;
  // Split-K: this CTA reduces K-chunk blockIdx.z (= its rank in a 1 x 1 x chunks cluster).
  const int it_begin = static_cast<int>(blockIdx.z) * args.chunk_stages;
  const int it_end = min(args.num_k_stages, it_begin + args.chunk_stages);

  if (threadIdx.x == 0) init_stage_ring<kStages>(ring, 4, &map_a, &map_b);  // 4 consumer warps
  __syncthreads();

  if (warpgroup == 0) {
    // Producer: one thread keeps kStages stages of copies in flight; the weight copies of the
    // first stages go out first (the weight-scale loads of the consumers overlap them). With two
    // consumer warpgroups it hands most of its registers to them (chunk totals live there).
    if (threadIdx.x == 0) {
      const uint32_t tx = args.a_stage_bytes + Cfg::kStageB;
      const int pre = min(kStages, it_end - it_begin);
      for (int li = 0; li < pre; ++li) {
        mbar_arrive_expect_tx(&full[li], tx);
        tma_load_2d(s_b + li * Cfg::kStageB, &map_b, &full[li], (it_begin + li) * kStageK, n0);
      }
      for (int li = 0; li < pre; ++li) {
        const int it = it_begin + li;
        tma_load_2d(s_a + li * Cfg::kStageA, &map_a, &full[li], it * kStageK, m0);
      }
      for (int it = it_begin + pre; it < it_end; ++it) {
        const int li = it - it_begin;
        const int s = li % kStages;
        mbar_wait(&empty[s], ((li / kStages) - 1) & 1);
        mbar_arrive_expect_tx(&full[s], tx);
        tma_load_2d(s_a + s * Cfg::kStageA, &map_a, &full[s], it * kStageK, m0);
        tma_load_2d(s_b + s * Cfg::kStageB, &map_b, &full[s], it * kStageK, n0);
      }
    }
    cluster_chunk_sum<kRegs, 128>(nullptr, false, nullptr);
    return;
  }

  // The weight scales of this CTA's K-blocks (kScaleCols weight-block rows), loaded by the
  // consumers while the first copies are in flight; layout [kScaleCols][num_kb].
  {
    const int scale_row0 = n0 / kBlock;
    const int kb0 = it_begin * Cfg::kKbPerStage;
    const int nkb = min(args.num_kb, it_end * Cfg::kKbPerStage) - kb0;
    for (int i = threadIdx.x - 128; i < Cfg::kScaleCols * nkb; i += 128) {
      const int c = i / nkb;
      const int kb = kb0 + (i - c * nkb);
      const int r = scale_row0 + c;
      s_sw[c * args.num_kb + kb] =
          r < args.scale_rows
              ? ue8m0_to_float(args.weight_scale[static_cast<int64_t>(r) * args.num_kb + kb])
              : 0.0f;
    }
    asm volatile("bar.sync 2, 128;" ::: "memory");
  }

  // Consumers.
  const int consumer = warpgroup - 1;
  const int t = threadIdx.x % 128;
  const int warp = t / 32;
  const int lane = t % 32;
  const int row0 = consumer * 64 + warp * 16 + lane / 4;  // this thread's rows: row0, row0 + 8

  float acc[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i)
    acc[i] = 0.0f;

  const uint32_t sw_addr = smem_addr(s_sw);  // weight scales [kScaleCols][num_kb] fp32
  // This thread's two activation rows; their K-block scales are read from the ue8m0 bytes (L1/L2
  // resident) before each stage's wait, so the loads overlap it.
  const int64_t grow0 = static_cast<int64_t>(m0) + row0;
  const uint8_t* sa_row0 = args.act_scale + grow0 * args.num_kb;
  const uint8_t* sa_row1 = sa_row0 + 8 * static_cast<int64_t>(args.num_kb);
  const bool have0 = grow0 < args.m;
  const bool have1 = grow0 + 8 < args.m;

  if constexpr (kBlockN == 128) {
    consume_halves_pipelined<Cfg, kBlock>(args, s_a, s_b, full, empty, sw_addr, consumer, lane,
                                          it_begin, it_end, sa_row0, sa_row1, have0, have1, acc);
  } else {
    // The other tiles. K-blocks whose wgmmas are issued together (one commit group, one wait)
    // into separate partials, then promoted one after the other: fewer serial wgmma round trips
    // per stage for the narrow decode tiles, where registers are plentiful. The arithmetic per
    // element is the same for every kBatch (each partial starts from scale-d = 0; promotions in
    // K order).
    constexpr int kBatch = kBlock == 32 ? (kBlockN <= 32 ? 4 : (kBlockN == 64 ? 2 : 1)) : 1;
    float part[kBatch][kRegs];
    for (int it = it_begin; it < it_end; ++it) {
      const int li = it - it_begin;
      const int s = li % kStages;
      float sa0v[Cfg::kKbPerStage], sa1v[Cfg::kKbPerStage];
#pragma unroll
      for (int kk = 0; kk < Cfg::kKbPerStage; ++kk) {
        const int kb = min(it * Cfg::kKbPerStage + kk, args.num_kb - 1);
        sa0v[kk] = have0 ? ue8m0_to_float(__ldg(sa_row0 + kb)) : 0.0f;
        sa1v[kk] = have1 ? ue8m0_to_float(__ldg(sa_row1 + kb)) : 0.0f;
      }
      mbar_wait(&full[s], (li / kStages) & 1);
      const uint64_t desc_a =
          smem_desc_k128_sw128(s_a + s * Cfg::kStageA + consumer * 64 * kStageK);
      const uint64_t desc_b = smem_desc_k128_sw128(s_b + s * Cfg::kStageB);
#pragma unroll
      for (int kk0 = 0; kk0 < Cfg::kKbPerStage; kk0 += kBatch) {
        wgmma_fence();
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
          mma_kblock<Mma, kBlock>(part[b], desc_a, desc_b, kk0 + b);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
#pragma unroll
          for (int i = 0; i < kRegs; ++i)
            fence_regs(part[b][i]);
        }

#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int kk = kk0 + b;
          const int kb = it * Cfg::kKbPerStage + kk;
          if (kb >= args.num_kb) break;
          const float sa0 = sa0v[kk];
          const float sa1 = sa1v[kk];
          float sw[Cfg::kScaleCols];
#pragma unroll
          for (int c = 0; c < Cfg::kScaleCols; ++c)
            sw[c] = lds_f32(sw_addr + 4u * static_cast<uint32_t>(c * args.num_kb + kb));
#pragma unroll
          for (int j = 0; j < kBlockN / 8; ++j) {
            const float w = sw[kBlockN >= kBlock ? (8 * j) / kBlock : 0];
            const float s0 = sa0 * w;  // powers of two: exact
            const float s1 = sa1 * w;
            acc[4 * j + 0] = fmaf(part[b][4 * j + 0], s0, acc[4 * j + 0]);
            acc[4 * j + 1] = fmaf(part[b][4 * j + 1], s0, acc[4 * j + 1]);
            acc[4 * j + 2] = fmaf(part[b][4 * j + 2], s1, acc[4 * j + 2]);
            acc[4 * j + 3] = fmaf(part[b][4 * j + 3], s1, acc[4 * j + 3]);
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
  }

  if (cluster_chunk_sum<kRegs, 128>(acc, true, reinterpret_cast<float*>(ring.a) + t)) {
    store_tile<kBlockN>(static_cast<OutT*>(args.out), args, acc, n0, m0 + row0, lane);
  }
#endif
}

}  // namespace di::fp8_sm90
