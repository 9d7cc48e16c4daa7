#pragma once

// The swapped sm_90a FP8 GEMM for decode batches (m <= 64): the weight is the wgmma A operand
// (64 rows of W per CTA, the M side of m64nNk32) and the tokens are B (N = kTok = m rounded up to
// 8, 16, 32 or 64). A CTA streams one 64-row weight slab over one fixed K-chunk; nothing of the
// weight tile is wasted on padding rows, whatever m is, and each stage's copy is 8 KB of weight.
//
// CTA = kWgs consumer warpgroups (64 weight rows each; they share the token tile, so the tokens
// are read from L2 once per 64 * kWgs weight rows) + one producer warp (warp 4 kWgs, one thread
// issues the bulk tensor copies). The K-chunk's weight scale bytes and activation scales (as
// floats, [K-block][token], so that a thread's token pair is one 8-byte load in the promotion)
// are staged in shared memory at the start. Per stage the consumer issues the wgmmas of every
// K-block of the stage into separate partials (one commit group), frees the stage as soon as they
// completed, and promotes in K order: acc = fma(partial, s_x * s_w, acc) — per output element
// exactly the operations of the unswapped kernel (fp8_gemm_sm90.cuh; the tensor core's 32-product
// sum does not depend on which operand is A), so rows stay bitwise batch-invariant across the two
// kernels. The K-chunk sums are combined in chunk order through distributed shared memory
// (cluster_chunk_sum).

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90.cuh"

namespace di::fp8_sm90 {

template <typename OutT>
__device__ __forceinline__ void store_one(OutT* p, float v) {
  if constexpr (sizeof(OutT) == 4) {
    *p = v;
  } else {
    *p = __float2bfloat16_rn(v);
  }
}

template <int kTok, int kBlock, int kWgs, typename OutT>
__global__ void __launch_bounds__(128 * kWgs + 32, swap_min_ctas(kTok, kWgs))
    fp8_gemm_sm90_swap_kernel(const __grid_constant__ CUtensorMap map_x,
                              const __grid_constant__ CUtensorMap map_w, const Sm90Args args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using Mma = WgmmaE4m3<kTok>;
  constexpr int kRegs = Mma::kRegs;
  constexpr int kStages = swap_stages(kTok, kWgs);
  constexpr int kRows = 64 * kWgs;  // weight rows per CTA
  constexpr int kKbPerStage = kStageK / kBlock;
  constexpr int kMmaPerKb = kBlock / 32;
  constexpr int kStageW = kRows * kStageK;
  constexpr int kStageX = kTok * kStageK;
  constexpr int kSwRows = kRows / kBlock > 0 ? kRows / kBlock : 1;  // weight-scale rows touched

  extern __shared__ uint8_t smem_raw[];
  const StageRing ring = carve_stage_ring<kStages, kStageW, kStageX>(smem_raw);
  uint8_t* s_w = ring.a;
  uint8_t* s_x = ring.b;
  uint64_t* full = ring.full;
  uint64_t* empty = ring.empty;
  uint8_t* s_swb = ring.tail;  // [kSwRows][chunk_kbs]
  const int chunk_kbs = args.chunk_stages * kKbPerStage;
  // Activation scales as floats [chunk_kbs][kTok] (a thread's token pair is one 8-byte load).
  float* s_sxf = reinterpret_cast<float*>(s_swb + swap_sw_bytes(kSwRows, chunk_kbs));

  const int n0 = blockIdx.x * kRows;
  const int it_begin = static_cast<int>(blockIdx.z) * args.chunk_stages;
  const int it_end = min(args.num_k_stages, it_begin + args.chunk_stages);
  const int kb_begin = it_begin * kKbPerStage;
  const int nkb = min(args.num_kb, it_end * kKbPerStage) - kb_begin;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  if (threadIdx.x == 128 * kWgs) init_stage_ring<kStages>(ring, 4 * kWgs, &map_x, &map_w);
  __syncthreads();

  grid_launch_dependents();  // the next kernel may start its weight-only prologue early

  if (warp == 4 * kWgs) {
    // Producer: kStages stages of (weight slab, tokens) copies in flight. The weight copies of
    // the first stages go out before the wait for the preceding kernel (programmatic dependent
    // launch): the weight does not depend on it, the tokens do.
    if (lane == 0) {
      constexpr uint32_t kTx = kStageW + kStageX;
      const int pre = min(kStages, it_end - it_begin);
      for (int li = 0; li < pre; ++li) {
        mbar_arrive_expect_tx(&full[li], kTx);
        tma_load_2d(s_w + li * kStageW, &map_w, &full[li], (it_begin + li) * kStageK, n0);
      }
      grid_dependency_wait();
      for (int li = 0; li < pre; ++li)
        tma_load_2d(s_x + li * kStageX, &map_x, &full[li], (it_begin + li) * kStageK, 0);
      for (int it = it_begin + pre; it < it_end; ++it) {
        const int li = it - it_begin;
        const int s = li % kStages;
        mbar_wait(&empty[s], ((li / kStages) - 1) & 1);
        mbar_arrive_expect_tx(&full[s], kTx);
        tma_load_2d(s_w + s * kStageW, &map_w, &full[s], it * kStageK, n0);
        tma_load_2d(s_x + s * kStageX, &map_x, &full[s], it * kStageK, 0);
      }
    }
    cluster_chunk_sum<kRegs, 128 * kWgs>(nullptr, false, nullptr);
    return;
  }

  // The chunk's scale bytes: weight [kSwRows][nkb] (rows past the weight: 1.0, never stored) and
  // activations [kTok][nkb] (tokens >= m: 0; their codes are the copy's zero fill).
  const int t = threadIdx.x;
  for (int i = t; i < kSwRows * nkb; i += 128 * kWgs) {
    const int c = i / nkb;
    const int j = i - c * nkb;
    const int r = n0 / kBlock + c;
    s_swb[c * chunk_kbs + j] =
        r < args.scale_rows
            ? args.weight_scale[static_cast<int64_t>(r) * args.num_kb + kb_begin + j]
            : uint8_t{127};
  }
  grid_dependency_wait();  // the activation scales come from the preceding kernel
  for (int i = t; i < kTok * nkb; i += 128 * kWgs) {
    const int tok = i / nkb;
    const int j = i - tok * nkb;
    s_sxf[j * kTok + tok] = ue8m0_to_float(
        tok < args.m ? args.act_scale[static_cast<int64_t>(tok) * args.num_kb + kb_begin + j]
                     : uint8_t{0});
  }
  asm volatile("bar.sync 2, %0;" ::"n"(128 * kWgs) : "memory");

  const int wg = warp / 4;              // consumer warpgroup: weight rows [64 wg, 64 wg + 64)
  const int r0 = warp * 16 + lane / 4;  // this thread's weight rows: r0, r0 + 8 (same B-block)
  const uint32_t swb = smem_addr(s_swb + (r0 / kBlock) * chunk_kbs);  // shared addresses
  const uint32_t sxf = smem_addr(s_sxf);
  const int tok_lane = 2 * (lane % 4);  // this thread's tokens: 8 j + tok_lane (+1)

  float acc[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i)
    acc[i] = 0.0f;

  // acc = fma(partial_kb, s_x[tok, kb] * s_w[kb], acc) for the K-blocks kk0 .. kk0 + kN - 1 of
  // stage li (K order; partial_kb from the wgmmas of that block alone).
  auto promote = [&](int li, int kk0, const auto& part, auto n_blocks) {
    constexpr int kN = decltype(n_blocks)::value;
#pragma unroll
    for (int b = 0; b < kN; ++b) {
      const int kbl = li * kKbPerStage + kk0 + b;  // K-block within the chunk
      if (kbl >= nkb) break;
      const float sw = ue8m0_to_float(static_cast<uint8_t>(lds_u8(swb + kbl)));
#pragma unroll
      for (int j = 0; j < kTok / 8; ++j) {
        const int tok = 8 * j + tok_lane;
        const float2 sx = lds_f32x2(sxf + 4 * (kbl * kTok + tok));
        const float s0 = sx.x * sw;  // powers of two
        const float s1 = sx.y * sw;
        acc[4 * j + 0] = fmaf(part[b][4 * j + 0], s0, acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(part[b][4 * j + 1], s1, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[b][4 * j + 2], s0, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[b][4 * j + 3], s1, acc[4 * j + 3]);
      }
    }
  };
  // Issues the wgmmas of K-blocks kk0 .. kk0 + kN - 1 of stage li into separate partials.
  auto issue = [&](int li, int kk0, auto& part, auto n_blocks) {
    constexpr int kN = decltype(n_blocks)::value;
    const int s = li % kStages;
    const uint64_t desc_w = smem_desc_k128_sw128(s_w + s * kStageW + wg * 64 * kStageK);
    const uint64_t desc_x = smem_desc_k128_sw128(s_x + s * kStageX);
    wgmma_fence();
#pragma unroll
    for (int b = 0; b < kN; ++b) {
#pragma unroll
      for (int j = 0; j < kMmaPerKb; ++j) {
        const int k32 = (kk0 + b) * kMmaPerKb + j;  // 32-byte steps: +2 in the >> 4 field
        Mma::mma(part[b], desc_w + 2 * k32, desc_x + 2 * k32, j == 0 ? 0 : 1);
      }
    }
    wgmma_commit();
  };
  auto settle = [&](auto& part, auto n_blocks) {
    constexpr int kN = decltype(n_blocks)::value;
#pragma unroll
    for (int b = 0; b < kN; ++b) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i)
        fence_regs(part[b][i]);
    }
  };
  // The tensor cores are done with stage li's shared memory: hand it back.
  auto release = [&](int li) {
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[li % kStages]);
  };
  auto wait_full = [&](int li) { mbar_wait(&full[li % kStages], (li / kStages) & 1); };
  const int n_st = it_end - it_begin;

  {
    // One wait per commit group (ptxas serialises wgmmas when other accumulators are read while
    // a group is in flight, so a second partial set would not overlap anything; the CTAs per SM
    // overlap each other instead). K-blocks per commit group: all of the stage's, except for 64
    // tokens with 32-column blocks (4 partials of 32 registers would spill): two groups of two.
    constexpr int kBatch = (kTok == 64 && kKbPerStage == 4) ? 2 : kKbPerStage;
    using Batch = std::integral_constant<int, kBatch>;
    float part[kBatch][kRegs];
    for (int li = 0; li < n_st; ++li) {
      wait_full(li);
#pragma unroll
      for (int kk0 = 0; kk0 < kKbPerStage; kk0 += kBatch) {
        issue(li, kk0, part, Batch{});
        wgmma_wait<0>();
        settle(part, Batch{});
        if (kk0 + kBatch == kKbPerStage) release(li);
        promote(li, kk0, part, Batch{});
      }
    }
  }

  if (cluster_chunk_sum<kRegs, 128 * kWgs>(
          acc, true, reinterpret_cast<float*>(ring.a) + wg * kRegs * 128 + t % 128)) {
    OutT* out = static_cast<OutT*>(args.out);
#pragma unroll
    for (int j = 0; j < kTok / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tok = 8 * j + tok_lane + e;
        if (tok >= args.m) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = n0 + r0 + 8 * h;
          if (col < args.n)
            store_one(out + static_cast<int64_t>(tok) * args.n + col, acc[4 * j + 2 * h + e]);
        }
      }
    }
  }
#endif
}

}  // namespace di::fp8_sm90
