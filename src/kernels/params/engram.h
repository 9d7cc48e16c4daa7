#pragma once

// Params of the Engram ops on the GPU (issue 8, delta spec §2). Raw pointers and sizes only (no
// CUDA types). Launchers: kernels/cuda/engram/engram.cuh; they validate (di::Error naming the op
// and the sizes), never allocate, never synchronize.
//
// One Engram layer of a step of `rows` tokens, after the host has hashed the tokens and gathered
// the table rows into the staging layout of engram/row_gather.h (and copied it to the device):
//   engram_decode_rows  staging -> e [rows * columns, head_dim], the exact table values
//   act_quant + fp8_gemm (wkv) -> kv [rows, (hc + 1) * dim]        (kernels/cuda/fp8_gemm)
//   engram_gate_mix     gates from (h, keys, wqk) and h += gate * value, in place
// The CPU reference is Model::engram (cpu::decode_rows and cpu::engram_gate_mix).

#include <cstdint>

#include "kernels/params/dense_ops.h"

namespace di {

// out[i, c] = e4m3(code[i, c]) * 2^(scale[i, c / 32] - 127), rounded once to fp32 (exact for
// every scale byte that keeps the value a normal or subnormal fp32, as in cpu::decode_rows<float>)
// and, for bf16 storage, once more to bf16 (RNE; exact for the scales a trained table has).
// Element-wise: batch-invariant by construction. A NaN code or scale byte gives NaN.
struct EngramDecodeParams {
  // [rows * cols] e4m3 codes then [rows * cols / 32] UE8M0 bytes (engram/row_gather.h), 16-byte
  // aligned; any device-accessible memory (a device copy, or pinned host memory mapped by UVA).
  const uint8_t* staging = nullptr;
  void* out = nullptr;  // [rows, cols] fp32 or bf16 (precision), 16-byte aligned
  int64_t rows = 0;     // staged table rows (tokens * hash columns)
  int64_t cols = 0;     // values per table row (engram_head_dim, 256 for V4.1); % 32 == 0
  ActPrecision precision = ActPrecision::kF32;
};

// For every row r and stream c < hc, with key = kv[r, c, :] and value = kv[r, hc, :]:
//   rstd = 1/sqrt(hss / dim + eps) * 1/sqrt(kss / dim + eps)    hss = sum h^2, kss = sum key^2
//   s    = dot * rstd * (1/sqrt(dim))                           dot = sum h * wqk[c] * key
//   gate = image row ? 0 : sigmoid(copysign(sqrt(max(|s|, 1e-6)), s))
//   h[r, c, :] = h[r, c, :] + gate * value
// in fp32 (bf16 storage is widened exactly and the new h rounded once, RNE). The three sums of a
// (row, stream) run in one fixed order that depends only on dim, never on rows: a row's outputs
// are bitwise the same whatever batch it is computed in. They differ from the CPU's ascending
// sums by fp32 reduction rounding (and expf's last bit), see tests/kernels/engram.
struct EngramGateMixParams {
  void* h = nullptr;                    // [rows, hc, dim] fp32 or bf16 (precision), in place
  const void* kv = nullptr;             // [rows, (hc + 1) * dim] same dtype: hc keys, the value
  const float* wqk = nullptr;           // [hc, dim] fp32
  const uint8_t* image_mask = nullptr;  // [rows] nonzero = image-span row (nullable: none)
  float* gates = nullptr;               // [rows, hc] out (nullable: not stored)
  int64_t rows = 0;
  int64_t hc = 0;      // hc_mult (4)
  int64_t dim = 0;     // hidden_size (5120); % 4 == 0
  float eps = 1e-20f;  // rms_norm_eps
  ActPrecision precision = ActPrecision::kF32;
};

}  // namespace di
