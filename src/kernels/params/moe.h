#pragma once

// Params of the MoE routing ops on the GPU (issue 8, delta spec §5.4): the router's top-k
// selection from the gate logits, the permutation of (token, slot) pairs into expert-contiguous
// order for the grouped expert GEMMs, and the combine of the expert outputs. Raw pointers and
// sizes only (no CUDA types). Launchers: kernels/cuda/moe/moe_route.cuh; they validate, never
// allocate, never synchronize.
//
// Semantics are the CPU reference's (kernels/cpu/moe_gate.h route_token and Model::moe):
//   score_e  = sqrt(softplus(logit_e / gate_temp)); selection = top-k of score_e + bias_e (the
//              image-span rows use bias_vl), lower expert id first on ties, ids in descending
//              selection order; weight_j = score_{id_j} / (sum_j score + 1e-20) when
//              norm_topk_prob and k > 1, times route_scale.
//   permute  pairs (row, j) sorted by (expert id, row, j): expert e's pairs are
//            [offsets[e], offsets[e + 1]) of `pair_rows` / `pair_weights` (a stable, deterministic
//            order that does not depend on the batch's other rows beyond their count).
//   combine  y[row] = (sum over the row's k experts in ascending expert id of expert_out[pos]) +
//            shared[row], added left to right in fp32 (the CPU's order).
//   expert FFN (Model::expert): g = act_quant(x) . w1^T, u = act_quant(x) . w3^T (FP4 e2m1
//            weights, one UE8M0 scale per 1 x 32), h = weight * silu(min(g, L)) * clamp(u, -L, L)
//            (L = swiglu_limit when > 0), y = act_quant(h) . w2^T; act_quant blocks of 32.

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"
#include "kernels/params/dense_ops.h"

namespace di {

// The largest number of experts per token the GPU routing ops take (V4.1: 6).
inline constexpr int32_t kMoeMaxTopk = 16;

struct MoeRouteParams {
  const float* logits = nullptr;        // [rows, experts] gate logits (x . W^T), fp32
  const float* bias = nullptr;          // [experts] selection bias
  const float* bias_vl = nullptr;       // [experts] bias of image-span rows (nullable: bias)
  const uint8_t* image_mask = nullptr;  // [rows] 1 = image-span row (nullable: none)
  int32_t* ids = nullptr;               // [rows, topk] selected experts, descending selection
  float* weights = nullptr;             // [rows, topk] routing weights
  int64_t rows = 0;
  int32_t experts = 0;  // <= 1024
  int32_t topk = 0;     // <= 16
  float gate_temp = 1.0f;
  bool norm_topk_prob = true;
  float route_scale = 1.0f;
};

// Expert tiles of the grouped GEMM: up to tile_tokens consecutive pairs of one expert, in expert
// order; written by moe_expert_tiles from moe_permute's offsets. Unused entries (the list has
// moe_expert_tile_bound entries) have expert = -1. Tiles of 8 pairs suit decode (an expert's
// weights are read once per tile: 1-2 pairs per expert at decode batches), tiles of 64 suit
// prefill; a pair's output is bitwise the same with either (the same tensor-core instructions
// and promotion order per 8-pair group).
constexpr int kMoeTileTokens = 8;
constexpr int kMoeTileTokensPrefill = 64;
struct MoeExpertTile {
  int32_t expert = -1;
  int32_t first_pair = 0;  // first pair position (into the permuted order)
  int32_t count = 0;       // pairs in the tile, 1..kMoeTileTokens
  int32_t pad = 0;
};

struct MoePermuteParams {
  const int32_t* ids = nullptr;  // [rows, topk] from moe_route
  int64_t rows = 0;
  int32_t topk = 0;
  int32_t experts = 0;
  int32_t* offsets = nullptr;     // [experts + 1] start of each expert's pairs; offsets[E] = pairs
  int32_t* pair_index = nullptr;  // [rows * topk] sorted pairs as row * topk + j
  int32_t* pair_pos = nullptr;    // [rows * topk] inverse: position of pair row * topk + j
  void* workspace = nullptr;      // moe_permute_workspace_bytes(rows, topk) bytes, 256-aligned
  size_t workspace_bytes = 0;
  // Optional (nullable): the expert tiles of moe_expert_tiles, written by the one-CTA counting
  // permutation as well (decode steps: one launch less); tile_tokens and the list length as
  // there (moe_expert_tile_bound). moe_permute returns whether it wrote them.
  MoeExpertTile* tiles = nullptr;
  int32_t tile_tokens = 0;
  int64_t tile_bound = 0;
};

struct MoeCombineParams {
  const void* expert_out = nullptr;   // [rows * topk, dim] expert outputs in permuted order
  const void* shared = nullptr;       // [rows, dim] shared-expert output (nullable: none)
  const int32_t* ids = nullptr;       // [rows, topk]
  const int32_t* pair_pos = nullptr;  // [rows * topk] from moe_permute
  void* y = nullptr;                  // [rows, dim]
  int64_t rows = 0;
  int32_t topk = 0;
  int64_t dim = 0;                              // % 4 == 0
  ActPrecision precision = ActPrecision::kF32;  // storage of expert_out, shared and y
};

struct MoeExpertTilesParams {
  const int32_t* offsets = nullptr;      // [experts + 1] from moe_permute
  int32_t experts = 0;                   // <= 1024
  int64_t pairs = 0;                     // rows * topk (= offsets[experts])
  int32_t tile_tokens = kMoeTileTokens;  // or kMoeTileTokensPrefill
  MoeExpertTile* tiles = nullptr;        // [moe_expert_tile_bound(experts, pairs, tile_tokens)]
};

// The routed experts' e2m1 codes on the GPU are tiled, not in the checkpoint's row-major [n, k / 2]
// order (pack_fp4_expert_codes regroups and re-encodes them once, at upload): [n / 64][ceil(k /
// 128)][64 rows] [64 bytes]. A tile is 64 rows x 128 columns, 4 KiB contiguous, and the K tiles of
// a row block follow each other, so the expert GEMM's warps stream long sequential runs instead of
// 64-byte pieces k / 2 bytes apart (DRAM row locality; docs/design/cuda_moe.md). The last K tile of
// a row block is zero-padded when k % 128 != 0, and the last row block when n % 64 != 0. Scales
// keep the checkpoint's [n, k / 32].
inline constexpr int64_t kFp4TileRows = 64;
inline constexpr int64_t kFp4TileCols = 128;
inline constexpr int64_t kFp4TileRowBytes = kFp4TileCols / 2;
inline constexpr int64_t kFp4TileBytes = kFp4TileRows * kFp4TileRowBytes;

DI_HOST_DEVICE constexpr int64_t fp4_expert_k_tiles(int64_t k) {
  return (k + kFp4TileCols - 1) / kFp4TileCols;
}
DI_HOST_DEVICE constexpr int64_t fp4_expert_codes_bytes(int64_t n, int64_t k) {
  return (n + kFp4TileRows - 1) / kFp4TileRows * fp4_expert_k_tiles(k) * kFp4TileBytes;
}
// The tiled codes also re-encode each byte (columns 2 b and 2 b + 1, checkpoint nibbles a = low,
// b = high; an e2m1 nibble is sign, then magnitude bits E1 E0 M) so that the expert GEMM turns it
// into e4m3 bytes (value * 2^-6: sign at bit 7, magnitude at bits 4..2) with five bit operations
// per four bytes instead of seven: bit 7 a.sign, 6 b.E1, 5 b.sign, 4..2 a.E1 a.E0 a.M, 1..0 b.E0
// b.M. Then a's e4m3 byte is the byte & 0x9C and b's is ((byte << 2) & 0x8C) | ((byte >> 2) &
// 0x10), four bytes at a time in a 32-bit word.
DI_HOST_DEVICE constexpr uint8_t fp4_expert_encode_byte(uint8_t c) {
  const uint32_t a = c & 0xFu, b = c >> 4;
  return static_cast<uint8_t>(((a & 8u) << 4) | ((a & 7u) << 2) | ((b & 4u) << 4) |
                              ((b & 8u) << 2) | (b & 3u));
}
DI_HOST_DEVICE constexpr uint8_t fp4_expert_decode_byte(uint8_t s) {
  const uint32_t a = ((s >> 4) & 8u) | ((s >> 2) & 7u);
  const uint32_t b = ((s >> 2) & 8u) | ((s >> 4) & 4u) | (s & 3u);
  return static_cast<uint8_t>(a | (b << 4));
}
// e4m3 bytes (value * 2^-6) of the even (low-nibble) / odd (high-nibble) elements of 4 encoded
// bytes.
DI_HOST_DEVICE constexpr uint32_t fp4_expert_even_e4m3(uint32_t x) {
  return x & 0x9C9C9C9Cu;
}
DI_HOST_DEVICE constexpr uint32_t fp4_expert_odd_e4m3(uint32_t x) {
  return ((x << 2) & 0x8C8C8C8Cu) | ((x >> 2) & 0x10101010u);
}

// Where the byte of columns (2 b, 2 b + 1) of `row` lies in the tiled codes.
DI_HOST_DEVICE constexpr int64_t fp4_expert_code_offset(int64_t row, int64_t b, int64_t k) {
  return ((row / kFp4TileRows) * fp4_expert_k_tiles(k) + b / kFp4TileRowBytes) * kFp4TileBytes +
         (row % kFp4TileRows) * kFp4TileRowBytes + b % kFp4TileRowBytes;
}

// One expert matrix on the GPU: e2m1 codes of [n, k] tiled as above (two per byte, the low
// nibble is the even column) and UE8M0 scales [n, k / 32]; device pointers, 16-byte aligned.
struct Fp4ExpertMatrix {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
};

// Grouped GEMM of the routed experts over FP4 weights: for every pair p of expert e (tile list)
// and output column c in [0, mats * n): out[p, c] = sum_k xq[a(p), k] * W_{c / n, e}[c % n, k]
// with xq dequantised per 32 (its UE8M0 scales) and W per 1 x 32; a(p) = pair_index[p] / topk
// (gather of the token's row, for w1/w3) or p (pair_index == nullptr, for w2). mats = 2 computes
// w1 and w3 in one launch (out = [g | u]). Per K-block of 32 an exact-input tensor-core partial,
// promoted in fp32 in ascending K-block order: a pair's result depends only on its own row.
struct MoeExpertGemmParams {
  const uint8_t* xq = nullptr;          // [activation rows, k] e4m3 codes (act_quant, block 32)
  const uint8_t* xq_scale = nullptr;    // [activation rows, k / 32] UE8M0 bytes
  const int32_t* pair_index = nullptr;  // [pairs] from moe_permute (gather), or nullptr
  int32_t topk = 1;                     // with pair_index
  const MoeExpertTile* tiles = nullptr;
  int32_t tile_tokens = kMoeTileTokens;      // the tile list's (kMoeTileTokens or ...Prefill)
  int64_t tile_count = 0;                    // entries of `tiles` (moe_expert_tile_bound)
  const Fp4ExpertMatrix* weights = nullptr;  // [mats * experts] device array: [m * experts + e]
  int32_t experts = 0;
  int32_t mats = 1;  // 1 or 2
  int64_t pairs = 0;
  int64_t n = 0;        // rows of each matrix, % 32 == 0
  int64_t k = 0;        // % 32 == 0
  void* out = nullptr;  // [pairs, mats * n] fp32 or bf16 (precision)
  ActPrecision precision = ActPrecision::kF32;
  // The tiles were complete before the launch preceding this one on the stream began (w2 after
  // moe_swiglu_quant): the kernel reads them and starts its weight copies before waiting for
  // that launch (programmatic dependent launch), so that they overlap its tail. False: nothing
  // is read before the wait (w1 | w3 right after the routing that writes the tiles).
  bool tiles_early = false;
};

// The activation order of the grouped expert GEMM: in every 32-block of a row its 16 even
// elements, then its 16 odd ones (the K order in which the FP4 weight nibbles reach the tensor
// cores). dst[r, 32 b + i] = src[r, 32 b + 2 i], dst[r, 32 b + 16 + i] = src[r, 32 b + 2 i + 1].
struct MoeInterleaveParams {
  const uint8_t* src = nullptr;  // [rows, k] e4m3 codes, 16-byte aligned
  uint8_t* dst = nullptr;        // [rows, k], 16-byte aligned, not overlapping src
  int64_t rows = 0;
  int64_t k = 0;  // % 32 == 0
};

// h = weight * silu(min(g, L)) * clamp(u, -L, L) in fp32 (rounded to the storage precision), then
// act_quant (block 32) of h, the w2 input. The CPU's arithmetic: exp rounded to fp32 once, IEEE
// division, left-to-right products.
struct MoeSwigluQuantParams {
  const void* gu = nullptr;        // [pairs, 2 * inter] g then u per row, fp32 or bf16 (precision)
  const float* weights = nullptr;  // [rows * topk] routing weights, or nullptr (weight 1)
  const int32_t* pair_index = nullptr;  // [pairs] with weights: pair p's weight is
                                        // weights[pair_index[p]]; nullptr: weights[p]
  int64_t pairs = 0;
  int64_t inter = 0;   // % 32 == 0
  float limit = 0.0f;  // swiglu_limit (<= 0: no clamp)
  ActPrecision precision = ActPrecision::kF32;
  uint8_t* codes = nullptr;   // [pairs, inter] e4m3
  uint8_t* scales = nullptr;  // [pairs, inter / 32] UE8M0
  bool interleave = false;    // codes in the expert GEMM's interleaved order (w2's input)
};

}  // namespace di
