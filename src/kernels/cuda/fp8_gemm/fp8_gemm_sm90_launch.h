#pragma once

// Internal: what the sm_90a launchers of fp8_gemm.cu's dispatch receive. One translation unit per
// weight block size instantiates the tile configurations (fp8_gemm_sm90_b32.cu, _b128.cu).

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm/fp8_gemm.h"

namespace di::fp8_sm90 {

inline constexpr int kDecodeStages = 8;       // block_m 64: weight streaming wants bytes in flight
inline constexpr int kPrefillStages = 5;      // block_m 128 x block_n 128: 34 KB per stage
inline constexpr int kPrefillFoldStages = 4;  // the same + 64 KB of fp32 K-chunk totals

struct Sm90Args {
  const uint8_t* weight_scale;  // [ceil(n / B), num_kb] ue8m0
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
  CUtensorMap map_a;   // quantised activations [m, k] e4m3, box {128, a_box_rows}, 128B swizzle
  CUtensorMap map_b;   // weight [n, k] e4m3, box {128, block_n}, 128B swizzle
  CUtensorMap map_sa;  // activation scales [num_kb, m_pad] fp32, box {block_m, 128 / B}
  Sm90Args args;
};

// Dynamic shared memory of a configuration (1024 bytes of alignment slack included).
constexpr size_t sm90_smem_bytes(int block_m, int block_n, int block, int stages, int num_kb,
                                 bool fold) {
  const int scale_cols = block_n >= block ? block_n / block : 1;
  const size_t stage = static_cast<size_t>(block_m) * 128 + static_cast<size_t>(block_n) * 128 +
                       static_cast<size_t>(block_m) * (128 / block) * 4;
  // Prefill with several K-chunks keeps fp32 chunk totals of the whole tile in shared memory.
  const size_t totals = fold ? 16 + static_cast<size_t>(block_m) * block_n * 4 : 0;
  return 1024 + stages * stage + 2 * stages * sizeof(uint64_t) +
         static_cast<size_t>(scale_cols) * num_kb * 4 + totals;
}

template <int kBlock>
void launch_sm90(const Fp8GemmPlan& plan, const Sm90Launch& launch, Fp8OutDtype out_dtype,
                 cudaStream_t stream);

}  // namespace di::fp8_sm90
