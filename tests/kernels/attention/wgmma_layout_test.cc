// The wgmma sparse-attention kernel's operand layout and thread maps (wgmma_operand_layout.h),
// checked on the host against the wgmma canonical layouts (PTX ISA "Shared Memory Matrix Layout";
// CUTLASS make_gmma_desc): the element each descriptor view reads is the one the kernel stored
// there, the tile-load map covers every unit once and stores without bank conflicts, and the P
// fragments are the S accumulators of the same (row, entry). No device needed: these run in CI.

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "kernels/cuda/attention/wgmma_operand_layout.h"

namespace di::attention_detail::wgmma_layout {
namespace {

// The hardware's 128-byte swizzle of a byte address: the 16-byte chunk bits [4, 7) XOR the
// 128-byte row bits [7, 10).
uint32_t swizzle128(uint32_t a) {
  return a ^ (((a >> 7) & 7u) << 4);
}

// Where the kernel stored bf16 value v (< 512) of line r.
uint32_t stored_at(int r, int v) {
  return opnd_off(r, v / 8) + 2u * static_cast<uint32_t>(v % 8);
}

TEST(WgmmaLayout, OperandOffsetIsTheAddressSwizzleOfPanelRows) {
  std::set<uint32_t> seen;
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 64; ++c) {
      const uint32_t linear = static_cast<uint32_t>((c / 8) * kPanel + r * kLine + (c % 8) * 16);
      EXPECT_EQ(opnd_off(r, c), swizzle128(linear)) << "line " << r << " chunk " << c;
      EXPECT_LT(opnd_off(r, c), static_cast<uint32_t>(kOperand));
      seen.insert(opnd_off(r, c));
    }
  }
  EXPECT_EQ(seen.size(), 64u * 64u);  // every chunk of the operand once
}

// K-major, 128-byte swizzle, 16-bit elements: element (row m, k < 16) of the step whose
// descriptor starts at `start` is at start + (m / 8) * SBO + (m % 8) * 128 + 2 k, swizzled. The
// kernel's S steps: Q and the tile both start at panel p, byte 32 s (k16 step s of the panel).
TEST(WgmmaLayout, KMajorStepsReadQAndTheTileValues) {
  for (int p = 0; p < 8; ++p) {
    for (int s = 0; s < 4; ++s) {
      const uint32_t start = static_cast<uint32_t>(p * kPanel + 32 * s);
      for (int m = 0; m < 64; ++m) {
        for (int k = 0; k < 16; ++k) {
          const uint32_t read = swizzle128(start + static_cast<uint32_t>(m / 8) * kKMajorSbo +
                                           static_cast<uint32_t>(m % 8) * kLine + 2u * k);
          ASSERT_EQ(read, stored_at(m, 64 * p + 16 * s + k))
              << "panel " << p << " step " << s << " row " << m << " k " << k;
        }
      }
    }
  }
}

// MN-major, 128-byte swizzle, 16-bit elements (CUTLASS's canonical ((8, 8, m), (8, k)) :
// ((1, 8, LBO), (64, SBO)) in elements): element (n, k) is at start + (n / 64) * LBO +
// ((n / 8) % 8) * 16 + (n % 8) * 2 + (k % 8) * 128 + (k / 8) * SBO, swizzled. The kernel's P V
// steps: warpgroup g, entries 16 kk .. 16 kk + 15 (K), value dims 256 g .. 256 g + 255 (N).
TEST(WgmmaLayout, MnMajorStepsReadTheTileTransposed) {
  for (int g = 0; g < 2; ++g) {
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t start = static_cast<uint32_t>(4 * g * kPanel + 16 * kk * kLine);
      for (int n = 0; n < 256; ++n) {
        for (int k = 0; k < 16; ++k) {
          const uint32_t off = static_cast<uint32_t>(n / 64) * kMnMajorLbo +
                               static_cast<uint32_t>((n / 8) % 8) * 16 + 2u * (n % 8) +
                               static_cast<uint32_t>(k % 8) * kLine +
                               static_cast<uint32_t>(k / 8) * kMnMajorSbo;
          ASSERT_EQ(swizzle128(start + off), stored_at(16 * kk + k, 256 * g + n))
              << "warpgroup " << g << " step " << kk << " dim " << n << " entry " << k;
        }
      }
    }
  }
}

// Instructions j < `per_thread` of the 8 warps x 32 lanes cover the 64 entries x `units` units of
// a tile once each.
void expect_cover(int per_thread, int units) {
  std::vector<int> count(static_cast<size_t>(64 * units), 0);
  for (int w = 0; w < 8; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < per_thread; ++j) {
        const int e = unit_entry(w, lane, j), u = unit_index(w, lane, j);
        ASSERT_TRUE(e >= 0 && e < 64 && u >= 0 && u < units) << w << " " << lane << " " << j;
        ++count[static_cast<size_t>(e * units + u)];
      }
    }
  }
  for (size_t i = 0; i < count.size(); ++i)
    EXPECT_EQ(count[i], 1) << "entry " << i / units << " unit " << i % units;
}

TEST(WgmmaLayout, TileLoadMapCoversEveryUnitOnce) {
  expect_cover(8, 32);  // FP8: 32 units of 16 codes an entry
  expect_cover(4, 16);  // FP4: 16 units of 32 values an entry
}

// The kernel reads a thread's entry address once per tile (load_tile) and stores its units to
// that entry's line (store_tile): the entry must not depend on the instruction.
TEST(WgmmaLayout, TileLoadMapKeepsOneEntryAThread) {
  for (int w = 0; w < 8; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 1; j < 8; ++j)
        EXPECT_EQ(unit_entry(w, lane, j), unit_entry(w, lane, 0)) << w << " " << lane << " " << j;
    }
  }
}

// A 16-byte shared store of a warp runs in four phases of 8 lanes; a phase is conflict-free when
// its 8 chunks fall in 8 different 16-byte bank groups. `chunks_per_unit`: the chunks a lane
// stores for its unit (2 for FP8: 16 values; 4 for FP4: 32), one store instruction each.
void expect_conflict_free(int per_thread, int chunks_per_unit) {
  for (int w = 0; w < 8; ++w) {
    for (int j = 0; j < per_thread; ++j) {
      for (int i = 0; i < chunks_per_unit; ++i) {
        for (int phase = 0; phase < 4; ++phase) {
          std::set<uint32_t> groups;
          for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
            const int e = unit_entry(w, lane, j), u = unit_index(w, lane, j);
            groups.insert((opnd_off(e, chunks_per_unit * u + i) / 16) % 8);
          }
          EXPECT_EQ(groups.size(), 8u)
              << "warp " << w << " instruction " << j << " store " << i << " phase " << phase;
        }
      }
    }
  }
}

TEST(WgmmaLayout, TileStoresAreBankConflictFree) {
  expect_conflict_free(8, 2);
  expect_conflict_free(4, 4);
}

TEST(WgmmaLayout, QLoadMapIsBankConflictFree) {
  // Q chunk u = tid + 256 j: head u / 64, chunk u % 64 (cp.async of 16 bytes).
  for (int j = 0; j < 16; ++j) {
    for (int tid = 0; tid < 256; tid += 8) {
      std::set<uint32_t> groups;
      for (int t = tid; t < tid + 8; ++t) {
        const int u = t + 256 * j;
        groups.insert((opnd_off(u / 64, u % 64) / 16) % 8);
      }
      EXPECT_EQ(groups.size(), 8u) << "j " << j << " threads " << tid;
    }
  }
}

// The accumulator pair (i, i + 1) of an m64nN wgmma (thread lane of warp w: accumulator 4 j + e
// at row 16 w + lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2) lands in the A fragment
// of an m64k16 step (register q: row 16 w + lane / 4 + 8 (q % 2), columns 16 step + 8 (q / 2) +
// 2 (lane % 4) + {0, 1}) at the same row and entry.
TEST(WgmmaLayout, PFragmentsHoldTheAccumulatorsOfTheSameRowAndEntry) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 32; i += 2) {
      const int j = i / 4, e = i % 4;
      const int acc_row = lane / 4 + 8 * (e / 2), acc_col = 8 * j + 2 * (lane % 4);
      const int step = pa_step(i), q = pa_reg(i);
      const int a_row = lane / 4 + 8 * (q % 2), a_col = 16 * step + 8 * (q / 2) + 2 * (lane % 4);
      EXPECT_EQ(acc_row, a_row) << "lane " << lane << " accumulator " << i;
      EXPECT_EQ(acc_col, a_col) << "lane " << lane << " accumulator " << i;
      EXPECT_TRUE(step >= 0 && step < 4 && q >= 0 && q < 4);
    }
  }
}

}  // namespace
}  // namespace di::attention_detail::wgmma_layout
