#pragma once

// Internal: what the sm_90a launchers of fp8_gemm.cu's dispatch receive. One translation unit per
// weight block size instantiates the tile configurations (fp8_gemm_sm90_b32.cu, _b128.cu).

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/fp8_gemm.h"

namespace di::fp8_sm90 {

inline constexpr int kDecodeStages = 8;   // block_m 64: weight streaming wants bytes in flight
inline constexpr int kPrefillStages = 6;  // block_m 128 x block_n 128: 32 KB per stage
inline constexpr int kSwapMaxM = 64;      // up to here: the swapped (weight-as-A) kernel
// Swapped kernel: kWgs consumer warpgroups of 64 weight rows; a stage is 64 kWgs weight rows x
// 128 K + tokens x 128. Stages and CTAs per multiprocessor keep ~100-150 KB of weight copies in
// flight per multiprocessor.
constexpr int swap_stages(int tokens, int wgs) {
  return wgs == 1 ? 6 : (tokens <= 32 ? 5 : 4);
}
constexpr int swap_min_ctas(int tokens, int wgs) {
  return wgs == 1 ? (tokens <= 16 ? 3 : 2) : (tokens <= 16 ? 2 : 1);
}

struct Sm90Args {
  const uint8_t* weight_scale;  // [ceil(n / B), num_kb] ue8m0
  const uint8_t* act_scale;     // [m, num_kb] ue8m0 (activation scales, row-major)
  void* out;                    // [m, n]
  int m;
  int n;
  int num_kb;              // ceil(k / B)
  int num_k_stages;        // ceil(k / 128)
  int scale_rows;          // ceil(n / B)
  int chunk_stages;        // K-chunk length in stages (fixed per k, independent of m)
  uint32_t a_stage_bytes;  // a_box_rows * 128: bytes the activation copy delivers per stage
};

struct Sm90Launch {
  CUtensorMap map_a;  // quantised activations [m, k] e4m3, box {128, a_box_rows}, 128B swizzle
  CUtensorMap map_b;  // weight [n, k] e4m3, box {128, block_n}, 128B swizzle
  Sm90Args args;
};

// Dynamic shared memory of a configuration (1024 bytes of alignment slack included).
constexpr size_t sm90_smem_bytes(int block_m, int block_n, int block, int stages, int num_kb) {
  const int scale_cols = block_n >= block ? block_n / block : 1;
  const size_t stage = static_cast<size_t>(block_m) * 128 + static_cast<size_t>(block_n) * 128;
  return 1024 + stages * stage + 2 * stages * sizeof(uint64_t) +
         static_cast<size_t>(scale_cols) * num_kb * 4;
}

// Dynamic shared memory of the persistent prefill kernel (128 x 128 tiles; the scales are read
// from global memory): the stages and their barriers, and for B = 32 with K-chunks (smem_tot)
// the consumer threads' chunk totals (256 x 64 fp32), with kPrefillFoldStages stages.
inline constexpr int kPrefillFoldStages = 5;
constexpr bool prefill_tot_in_smem(int block, int num_chunks) {
  return block == 32 && num_chunks > 1;
}
constexpr size_t sm90_prefill_smem_bytes(int stages, bool smem_tot) {
  return 1024 + static_cast<size_t>(stages) * (2 * 128 * 128 + 2 * sizeof(uint64_t)) + 16 +
         (smem_tot ? 256 * 64 * sizeof(float) : 0);
}

// The swapped kernel (m <= kSwapMaxM): 64 wgs weight rows per CTA as the wgmma A operand, the
// tokens (padded to `tokens` = 8, 16, 32 or 64) as B; one K-chunk per CTA. Each ring stage
// carries its scale words: one per token and one per weight-block row of the CTA (padded to
// an even count).
constexpr int swap_scale_rows(int wgs, int block) {
  return 64 * wgs / block > 0 ? 64 * wgs / block : 1;
}
constexpr int swap_scale_words(int tokens, int wgs, int block) {
  return tokens + (swap_scale_rows(wgs, block) + 1) / 2 * 2;
}
constexpr size_t sm90_swap_smem_bytes(int tokens, int wgs, int block) {
  const int stages = swap_stages(tokens, wgs);
  const size_t stage = static_cast<size_t>(64 * wgs) * 128 + static_cast<size_t>(tokens) * 128;
  return 1024 + stages * stage + 2 * stages * sizeof(uint64_t) +
         static_cast<size_t>(stages) * swap_scale_words(tokens, wgs, block) * sizeof(uint32_t);
}

template <int kBlock>
void launch_sm90(const Fp8GemmPlan& plan, const Sm90Launch& launch, Fp8OutDtype out_dtype,
                 cudaStream_t stream);

}  // namespace di::fp8_sm90
