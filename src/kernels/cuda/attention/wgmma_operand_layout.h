#pragma once

// The shared-memory operand layout and the thread maps of the wgmma sparse-attention kernel
// (sparse_attention_wgmma.cu), as plain constexpr functions so that host tests can check them
// against the wgmma canonical layouts (tests/kernels/attention/wgmma_layout_test.cc).
//
// An operand (Q, or a tile of 64 entries) is 64 lines (heads, entries) x 512 bf16 values, stored
// as 8 panels of 64 values: panel p holds values [64 p, 64 p + 64) of every line, 128 bytes a
// line, lines 128 bytes apart, with the 128-byte swizzle (16-byte chunk c of line r stored at
// chunk c ^ (r % 8); the panels are 1024-byte aligned, so this is the hardware's address-based
// swizzle: bits [4, 7) ^= bits [7, 10)).

#include <cstdint>

#if defined(__CUDACC__)
#define DI_WGMMA_LAYOUT_HD __host__ __device__
#else
#define DI_WGMMA_LAYOUT_HD
#endif

namespace di::attention_detail::wgmma_layout {

inline constexpr int kLine = 128;               // bytes of a line within a panel: 64 bf16
inline constexpr int kPanel = 64 * kLine;       // 64 lines x 64 values: 8 KiB
inline constexpr int kOperand = 8 * kPanel;     // 512 values a line: 64 KiB
inline constexpr int kGroupStride = 8 * kLine;  // 8-line groups (the swizzle pattern): 1 KiB

// Byte offset of the 16-byte chunk holding values [8 c, 8 c + 8) (c < 64) of line r.
DI_WGMMA_LAYOUT_HD constexpr uint32_t opnd_off(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * kPanel + r * kLine + (((c & 7) ^ (r & 7)) << 4));
}

// The tile-load map: instruction j (FP8 tiles: j < 8, units of 16 codes; FP4: j < 4, units of 32
// values) of lane `lane` of warp `warp` (of 8) takes 16-byte unit unit_index(...) of entry
// unit_entry(...) of the 64-entry tile. Warp w always takes entries 8 w .. 8 w + 7, 4 units of
// each per instruction: a warp reads 64 contiguous bytes of each of its 8 entries, and the 8
// lanes of a quarter-warp store to 8 different entries (8 different bank groups after the
// swizzle).
DI_WGMMA_LAYOUT_HD constexpr int unit_entry(int warp, int lane, int j) {
  return 8 * ((warp + 8 * j) % 8) + lane % 8;
}
DI_WGMMA_LAYOUT_HD constexpr int unit_index(int warp, int lane, int j) {
  return 4 * ((warp + 8 * j) / 8) + lane / 8;
}

// Descriptor fields (bytes; the descriptor holds them >> 4) of the two operand views:
// K-major (S = Q K^T: Q as A, the tile as B): 8-line groups kGroupStride apart, the leading
// offset unused (1); the k16 step s of panel p starts at p * kPanel + 32 * s.
// MN-major (P V: the tile as B with N = value dims, K = entries, imm-trans-b = 1): the leading
// byte offset is the distance between 64-value panels (kPanel), the stride byte offset between
// 8-entry groups (kGroupStride); the step of entries 16 kk .. starts 16 kk lines into the panel.
inline constexpr uint32_t kKMajorLbo = 16;
inline constexpr uint32_t kKMajorSbo = kGroupStride;
inline constexpr uint32_t kMnMajorLbo = kPanel;
inline constexpr uint32_t kMnMajorSbo = kGroupStride;

// The P fragments: the S accumulator pair (i, i + 1) (i even; accumulator i = 4 j + e holds row
// 16 w + lane / 4 + 8 (e / 2), entry 8 j + 2 (lane % 4) + e % 2) is register pa_reg(i) of the A
// fragment of k16 step pa_step(i) (register q holds row 16 w + lane / 4 + 8 (q % 2), entries
// 16 step + 8 (q / 2) + 2 (lane % 4) + {0, 1}).
DI_WGMMA_LAYOUT_HD constexpr int pa_step(int i) {
  return i / 8;
}
DI_WGMMA_LAYOUT_HD constexpr int pa_reg(int i) {
  return (i % 8) / 2;
}

}  // namespace di::attention_detail::wgmma_layout

#undef DI_WGMMA_LAYOUT_HD
