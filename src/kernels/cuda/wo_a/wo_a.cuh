#pragma once

// CUDA launcher of the grouped low-rank attention output projection wo_a (kernels/params/wo_a.h).
// Host-only declarations; the launcher validates (di::Error naming the op and sizes) before any
// CUDA call, never allocates, never synchronizes.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/params/wo_a.h"

namespace di {

// The fixed K split of a group's dot products (1, 2, 4 or 8 slices of group_width, summed in
// slice order): a function of group_width only, never of rows. 8 for V4.1's 4096.
int wo_a_k_split(int64_t group_width);

// The checkpoint's row-major e4m3 codes [rows, group_width] of wo_a regrouped into the GPU's tiled
// order (kernels/params/wo_a.h); dst holds rows * group_width bytes. Host code, once at upload;
// rows and group_width multiples of 32, else di::Error.
void pack_wo_a_weight(const uint8_t* src, int64_t rows, int64_t group_width, uint8_t* dst);

// z = the grouped projection of o by the FP8 block-scaled wo_a (decode regime: weight streaming).
void wo_a(const WoAParams& params, cudaStream_t stream);

// Whether wo_a can also write z's block-32 act_quant (WoAParams::z_codes / z_scales): when each
// cluster rank stores whole 32-column blocks of z (256 / wo_a_k_split(group_width) == 32, rank a
// multiple of 32; V4.1: yes). A function of the shape only.
bool wo_a_fuses_act_quant(const WoAParams& params);

}  // namespace di
