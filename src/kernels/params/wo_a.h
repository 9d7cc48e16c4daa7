#pragma once

// Params of the grouped low-rank attention output projection `wo_a` of DeepSeek-V4.1 on the GPU
// (Model::attention, the step between the sparse attention output and wo_b). Raw pointers and
// sizes only (no CUDA types). Launcher: kernels/cuda/wo_a/wo_a.cuh; it validates, never
// allocates, never synchronizes.
//
// Semantics are the CPU reference's (cpu::linear on the exactly decoded weights, no activation
// quantisation): for every row r, group g in [0, groups) and n in [0, rank)
//   z[r, g * rank + n] = sum_k o[r, g * group_width + k] * W[g * rank + n, k],  k in [0, gw)
// with W[i, k] = e4m3(weight[i, k]) * 2^(weight_scale[i / block, k / block] - 127) (the decode of
// cpu::fp8_block_weight / cpu::decode_rows with bn = bk = block).
//
// Arithmetic (docs in kernels/cuda/wo_a/wo_a.cu): the weights become bf16 exactly with the block
// scale folded in; bf16 activations are used as they are, fp32 activations as hi + lo bf16 parts
// (about 16 significant bits); products are exact and summed in fp32 on the tensor cores in a
// fixed K order, with a K split that depends on group_width only. Each output depends only on its
// own row of `o`: rows are bitwise batch-invariant.
//
// V4.1 sizes: groups 8, group_width 4096 (64 heads x 512 / 8), rank 1024, block 32 (V4: 128).

#include <cstdint>

#include "common/host_device.h"
#include "kernels/params/dense_ops.h"

namespace di {

// The weight's e4m3 codes on the GPU are tiled, not in the checkpoint's row-major order
// (pack_wo_a_weight regroups them once, at upload): 32 x 32 tiles of 1 KiB, [groups * rank / 32]
// [group_width / 32][32 rows][32 bytes], so that a warp's 32 rows of one 32-column stage are one
// contiguous run and its next stage follows it (docs/design/cuda_forward.md). A group's rows
// [g rank, (g + 1) rank) are then the tiled codes of its own [rank, group_width] matrix, starting
// at byte g * rank * group_width. Scales keep the checkpoint's layout.
inline constexpr int64_t kWoATile = 32;
DI_HOST_DEVICE constexpr int64_t wo_a_code_offset(int64_t row, int64_t col, int64_t group_width) {
  return ((row / kWoATile) * (group_width / kWoATile) + col / kWoATile) * kWoATile * kWoATile +
         (row % kWoATile) * kWoATile + col % kWoATile;
}

// Pointers are device memory; o and weight 16-byte aligned, z aligned to its elements.
struct WoAParams {
  const void* o = nullptr;                      // [rows, groups * group_width] fp32 or bf16
  ActPrecision precision = ActPrecision::kF32;  // storage of o and z
  const uint8_t* weight = nullptr;  // [groups * rank, group_width] e4m3fn codes, tiled as above
  const uint8_t* weight_scale = nullptr;  // [ceil(groups * rank / block), group_width / block]
  int block = 32;                         // scale block edge: 32 (V4.1) or 128 (V4-Flash)
  int64_t rows = 0;
  int64_t groups = 0;
  int64_t rank = 0;         // R = o_lora_rank, % block == 0 (groups start on scale blocks)
  int64_t group_width = 0;  // gw: % 64 == 0, % block == 0, gw / wo_a_k_split(gw) <= 1024
                            // (every multiple of 512 up to 8192, every gw <= 1024)
  void* z = nullptr;        // [rows, groups * rank], same precision as o
  // Optional, for wo_b's FP8 GEMM: act_quant of the stored z with block 32 (the standalone
  // act_quant's bits), written beside z: e4m3 codes [rows, groups * rank] and UE8M0 scale bytes
  // [rows, groups * rank / 32]. Only where wo_a_fuses_act_quant(params) (V4.1's shapes).
  uint8_t* z_codes = nullptr;
  uint8_t* z_scales = nullptr;
};

}  // namespace di
