#pragma once

// CUDA launchers of the block-scaled FP8 GEMM (kernels/params/fp8_gemm.h). Host-only declarations:
// safe to include from .cc files. Plan once per shape (host-side tile choice, no device calls),
// then launch any number of times; launchers validate (di::Error), never allocate and never
// synchronize. The one runtime-to-kernel dispatch point is fp8_gemm() (per architecture, then per
// tile configuration).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/params/fp8_gemm.h"

namespace di {

enum class Fp8GemmArch : uint8_t { kSm90 };  // room for kSm100 (tcgen05) later

// Tile configuration of one GEMM shape. Every configuration reduces K in the same order per
// output element (one K-block after the other, each block's partial from the same wgmma k32
// instructions, promoted with the same fp32 fma), so a row's result does not depend on m.
struct Fp8GemmPlan {
  Fp8GemmArch arch = Fp8GemmArch::kSm90;
  // m <= 64: the swapped kernel (weight rows as the wgmma M side, 64 per consumer warpgroup;
  // block_m = the token tile 8, 16, 32 or 64). Otherwise 64 rows per consumer warpgroup.
  bool swapped = false;
  int swap_wgs = 1;  // swapped: consumer warpgroups per CTA (block_n = 64 swap_wgs weight rows)
  int block_m = 128;
  int block_n = 128;     // 16, 32, 64 or 128
  int stages = 4;        // shared-memory pipeline depth, 128 K-columns per stage
  int a_box_rows = 128;  // activation rows copied per stage (<= block_m; small m copies fewer)
  // Fixed split-K: K is cut into num_chunks chunks of chunk_stages x 128 columns, a function of
  // (n, k, #SMs) only (never of m). Each chunk's fp32 sum restarts at 0; the chunk sums are added
  // in chunk order. Decode runs one CTA per chunk (cluster of num_chunks, DSMEM combine); prefill
  // folds the chunks in one CTA: the same fp32 operations, so rows stay bitwise batch-invariant.
  int chunk_stages = 1;
  int num_chunks = 1;
  int64_t m = 0, n = 0, k = 0;
  int block = 32;
  size_t smem_bytes = 0;
  unsigned grid_m = 0, grid_n = 0;
  // block_m 128: the persistent prefill kernel (6 stages; 5 for B = 32 with K-chunks, whose
  // totals take the shared memory of the sixth).
  bool persistent = false;
  unsigned ctas = 0;  // CTAs launched: grid_m x grid_n, or (persistent) at most one per SM
};

// Bytes of workspace the GEMM needs to quantise m x k activations (e4m3 codes + ue8m0 scales);
// none is needed when the caller passes already-quantised activations (Fp8GemmParams::xq).
size_t fp8_gemm_workspace_bytes(int64_t m, int64_t k, int block);

// Chooses the kernel for (m, n, k, block) on a device with `sm_count` multiprocessors and compute
// capability sm_major.sm_minor (9.0 only for now: di::Error otherwise).
Fp8GemmPlan plan_fp8_gemm(int64_t m, int64_t n, int64_t k, int block, int sm_count, int sm_major,
                          int sm_minor);

// act_quant_e4m3 into q / scale (also the first step of fp8_gemm).
void fp8_act_quant(const Fp8ActQuantParams& params, cudaStream_t stream);

// y = act_quant(x) * W^T with per-K-block scaling; params.m/n/k/block must match the plan's.
void fp8_gemm(const Fp8GemmParams& params, const Fp8GemmPlan& plan, cudaStream_t stream);

}  // namespace di
