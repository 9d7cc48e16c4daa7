#pragma once

// The swapped sm_90a FP8 GEMM for decode batches (m <= 64): the weight is the wgmma A operand
// (64 rows of W per CTA, the M side of m64nNk32) and the tokens are B (N = kTok = m rounded up to
// 8, 16, 32 or 64). A CTA streams one 64-row weight slab over one fixed K-chunk; nothing of the
// weight tile is wasted on padding rows, whatever m is, and each stage's copy is 8 KB of weight.
//
// CTA = kWgs consumer warpgroups (64 weight rows each; they share the token tile, so the tokens
// are read from L2 once per 64 * kWgs weight rows) + one producer warp (warp 4 kWgs, one thread
// issues the bulk tensor copies; its 32 lanes copy the stage's scale words with cp.async, which
// the stage's full barrier also waits for). So the scale bytes travel with the stage: a word of
// four K-blocks per token and per weight-block row in a small slot beside the stage, read with
// two or three shared loads a stage. (Staging the K-chunk's scales in shared memory at the
// start put ~2-3 serialised L2 round trips after the wait for the preceding kernel; loading
// them from global memory one stage ahead in the consumers cost an L2 round trip a stage on the
// multi-chunk shapes; docs/PERF.md, twenty-eighth session.) Per stage the consumer issues the
// wgmmas of every K-block of the stage into separate partials (one commit group), frees the stage
// as soon as they completed, and promotes in K order: acc = fma(partial, s_x * s_w, acc) — per
// output element exactly the operations of the unswapped kernel (fp8_gemm_sm90.cuh; the tensor
// core's 32-product sum does not depend on which operand is A), so rows stay bitwise
// batch-invariant across the two kernels. The K-chunk sums are combined in chunk order through
// distributed shared memory (cluster_chunk_sum).

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90.cuh"

namespace di::fp8_sm90 {

// The scale words of one K-stage a consumer thread of the swapped kernel needs (4 K-blocks'
// bytes of a row each, little-endian): its kTok / 4 tokens' activation rows (token
// 8 (q / 2) + 2 (lane % 4) + q % 2) and its weight-block row.
template <int kTok>
struct SwapScales {
  uint32_t x[kTok / 4];
  uint32_t w;
};

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
  constexpr int kSwRows = swap_scale_rows(kWgs, kBlock);
  constexpr int kScWords = swap_scale_words(kTok, kWgs, kBlock);

  extern __shared__ uint8_t smem_raw[];
  const StageRing ring = carve_stage_ring<kStages, kStageW, kStageX>(smem_raw);
  uint8_t* s_w = ring.a;
  uint8_t* s_x = ring.b;
  uint64_t* full = ring.full;
  uint64_t* empty = ring.empty;
  // Each stage's scale words (4 K-blocks' bytes of a row each, K-block kbw + i at byte i, kbw =
  // the stage's first K-block rounded down to 4): tokens [0, kTok), then the CTA's weight-block
  // rows [kTok, kTok + kSwRows).
  uint32_t* s_sc = reinterpret_cast<uint32_t*>(ring.tail);

  const int n0 = blockIdx.x * kRows;
  const int it_begin = static_cast<int>(blockIdx.z) * args.chunk_stages;
  const int it_end = min(args.num_k_stages, it_begin + args.chunk_stages);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  // full: the producer's expect_tx + its 32 lanes' scale-word arrivals.
  if (threadIdx.x == 128 * kWgs) init_stage_ring<kStages>(ring, 4 * kWgs, &map_x, &map_w, 33);
  __syncthreads();

  grid_launch_dependents();  // the next kernel may start its weight-only prologue early

  // 32-bit scale-word copies: every row base 4-byte aligned (num_kb % 4 == 0, aligned bases).
  const bool words = (args.num_kb % 4) == 0 &&
                     (reinterpret_cast<uintptr_t>(args.act_scale) % 4) == 0 &&
                     (reinterpret_cast<uintptr_t>(args.weight_scale) % 4) == 0;

  if (warp == 4 * kWgs) {
    // Producer: kStages stages of (weight slab, tokens, scale words) copies in flight; lane 0
    // issues the bulk tensor copies, the 32 lanes the scale words (cp.async, whose completion
    // the stage's full barrier also waits for: the words arrive with the stage). The weight
    // copies and words of the first stages go out before the wait for the preceding kernel
    // (programmatic dependent launch): the weight does not depend on it, the tokens do.
    constexpr uint32_t kTx = kStageW + kStageX;
    // Stage it's scale words into ring slot s: kPart 1 the weight rows, 2 the tokens (>= m: 0,
    // their codes are the copy's zero fill), 3 both.
    const auto copy_words = [&](int s, int it, auto part) {
      constexpr int kPart = decltype(part)::value;
      const int kbw = (it * kKbPerStage) & ~3;
      uint32_t* dst = s_sc + s * kScWords;
      for (int i = lane; i < kTok + kSwRows; i += 32) {
        const bool tok = i < kTok;
        if ((tok && (kPart & 2) == 0) || (!tok && (kPart & 1) == 0)) continue;
        const int r = n0 / kBlock + (i - kTok);
        const bool have = tok ? i < args.m : r < args.scale_rows;
        const uint8_t* row = tok ? args.act_scale + static_cast<int64_t>(i) * args.num_kb
                                 : args.weight_scale + static_cast<int64_t>(r) * args.num_kb;
        if (words) {
          cuda_detail::cp_async4(dst + i, row + kbw, have);
        } else {
          dst[i] = load_scale_bytes<4>(row, have, kbw, args.num_kb);
        }
      }
    };
    // This lane's words of stage slot s are written (cp.async: once they have landed).
    const auto words_arrive = [&](int s) {
      if (words) {
        cp_async_mbar_arrive_noinc(&full[s]);
      } else {
        mbar_arrive(&full[s]);
      }
    };
    const int pre = min(kStages, it_end - it_begin);
    for (int li = 0; li < pre; ++li) {
      if (lane == 0) {
        mbar_arrive_expect_tx(&full[li], kTx);
        tma_load_2d(s_w + li * kStageW, &map_w, &full[li], (it_begin + li) * kStageK, n0);
      }
      copy_words(li, it_begin + li, std::integral_constant<int, 1>{});
    }
    grid_dependency_wait();
    for (int li = 0; li < pre; ++li) {
      if (lane == 0) {
        tma_load_2d(s_x + li * kStageX, &map_x, &full[li], (it_begin + li) * kStageK, 0);
      }
      copy_words(li, it_begin + li, std::integral_constant<int, 2>{});
      words_arrive(li);
    }
    for (int it = it_begin + pre; it < it_end; ++it) {
      const int li = it - it_begin;
      const int s = li % kStages;
      mbar_wait(&empty[s], ((li / kStages) - 1) & 1);
      if (lane == 0) {
        mbar_arrive_expect_tx(&full[s], kTx);
        tma_load_2d(s_w + s * kStageW, &map_w, &full[s], it * kStageK, n0);
        tma_load_2d(s_x + s * kStageX, &map_x, &full[s], it * kStageK, 0);
      }
      copy_words(s, it, std::integral_constant<int, 3>{});
      words_arrive(s);
    }
    cluster_chunk_sum<kRegs, 128 * kWgs>(nullptr, false, nullptr);
    return;
  }

  const int wg = warp / 4;              // consumer warpgroup: weight rows [64 wg, 64 wg + 64)
  const int r0 = warp * 16 + lane / 4;  // this thread's weight rows: r0, r0 + 8 (same B-block)
  const int tok_lane = 2 * (lane % 4);  // this thread's tokens: 8 j + tok_lane (+1)

  const uint32_t sc_base = smem_addr(s_sc);
  const uint32_t sw_off = 4u * static_cast<uint32_t>(kTok + r0 / kBlock);  // weight-block row
  const uint32_t sx_off = 4u * static_cast<uint32_t>(tok_lane);
  // The scale words of the stage in slot s (read before the slot is released).
  const auto read_words = [&](int s) {
    SwapScales<kTok> sc;
    const uint32_t slot = sc_base + 4u * static_cast<uint32_t>(s * kScWords);
    sc.w = __float_as_uint(lds_f32(slot + sw_off));
#pragma unroll
    for (int j = 0; j < kTok / 8; ++j) {
      const float2 v = lds_f32x2(slot + sx_off + 32u * j);
      sc.x[2 * j] = __float_as_uint(v.x);
      sc.x[2 * j + 1] = __float_as_uint(v.y);
    }
    return sc;
  };
  grid_dependency_wait();  // (the output may be read by the preceding kernel)

  float acc[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i)
    acc[i] = 0.0f;

  // acc = fma(partial_kb, s_x[tok, kb] * s_w[kb], acc) for the K-blocks kk0 .. kk0 + kN - 1 of
  // stage it (K order; partial_kb from the wgmmas of that block alone).
  auto promote = [&](int it, int kk0, const SwapScales<kTok>& sc, const auto& part, auto n_blocks) {
    constexpr int kN = decltype(n_blocks)::value;
#pragma unroll
    for (int b = 0; b < kN; ++b) {
      const int kk = kk0 + b;
      if (it * kKbPerStage + kk >= args.num_kb) break;
      const int byte = ((it * kKbPerStage) & 3) + kk;  // its byte in the words
      const float sw = scale_byte(sc.w, byte);
#pragma unroll
      for (int j = 0; j < kTok / 8; ++j) {
        const float s0 = scale_byte(sc.x[2 * j], byte) * sw;  // powers of two
        const float s1 = scale_byte(sc.x[2 * j + 1], byte) * sw;
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
      const SwapScales<kTok> cur = read_words(li % kStages);
#pragma unroll
      for (int kk0 = 0; kk0 < kKbPerStage; kk0 += kBatch) {
        issue(li, kk0, part, Batch{});
        wgmma_wait<0>();
        settle(part, Batch{});
        if (kk0 + kBatch == kKbPerStage) release(li);
        promote(it_begin + li, kk0, cur, part, Batch{});
      }
    }
  }

  if (cluster_chunk_sum<kRegs, 128 * kWgs>(
          acc, true, reinterpret_cast<float*>(ring.a) + wg * kRegs * 128 + threadIdx.x % 128)) {
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
