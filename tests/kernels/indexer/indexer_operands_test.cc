// The indexer decode kernel's P / N operand tables (indexer_operands.h), checked on the host with
// an emulation of the `prmt` instruction: for every code word, the P and N bytes the kernel forms
// (selectors w, w >> 16, and both XOR 0x8888) add up to 2 * e2m1 << d per element. Runs without
// a GPU.

#include "kernels/cuda/indexer/indexer_operands.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "common/fp4.h"

namespace di::indexer_detail {
namespace {

// prmt.b32 d, a, b, c in the default mode (PTX ISA): byte n of d is byte (c >> 4n) & 7 of the
// 8 bytes {b, a}, or the sign of that byte replicated when bit 4n + 3 of c is set.
uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {
  const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t sel = (c >> (4 * n)) & 0xFu;
    uint32_t byte = static_cast<uint32_t>(bytes >> (8 * (sel & 7u))) & 0xFFu;
    if (sel & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
    r |= byte << (8 * n);
  }
  return r;
}

int8_t byte_at(uint32_t word, int i) {
  return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * i)));
}

// The operands of one code word as the kernel forms them; element i of the word (nibble i) is
// byte i of lo (i < 4) or byte i - 4 of hi.
struct Words {
  uint32_t p_lo, p_hi, n_lo, n_hi;
};
Words operands(uint32_t w, int d) {
  const uint32_t tp0 = pn_table_word(d, 0), tp1 = pn_table_word(d, 1);
  const uint32_t tn0 = pn_table_word(d, 2), tn1 = pn_table_word(d, 3);
  const uint32_t hi = w >> 16;
  return {prmt(tp0, tp1, w), prmt(tp0, tp1, hi), prmt(tn0, tn1, w ^ 0x8888u),
          prmt(tn0, tn1, hi ^ 0x8888u)};
}

void expect_word(uint32_t w, int d, int64_t& bad) {
  const Words o = operands(w, d);
  for (int i = 0; i < 8; ++i) {
    const uint8_t code = static_cast<uint8_t>((w >> (4 * i)) & 0xFu);
    const int want = static_cast<int>(2.0f * e2m1_to_float(code)) * (1 << d);
    const int p = byte_at(i < 4 ? o.p_lo : o.p_hi, i % 4);
    const int n = byte_at(i < 4 ? o.n_lo : o.n_hi, i % 4);
    if ((p + n != want || p < 0 || p > 97 || n > 0 || n < -96) && bad++ < 8) {
      ADD_FAILURE() << "word 0x" << std::hex << w << std::dec << " d " << d << " element " << i
                    << ": P " << p << " + N " << n << " != " << want;
    }
  }
}

TEST(IndexerOperands, PPlusNIsTheScaledCodeForEveryFourCodeGroup) {
  int64_t bad = 0;
  for (int d = 0; d <= kMaxAlignShift; ++d) {
    for (uint32_t lo = 0; lo < 0x10000u; ++lo)
      expect_word(lo | (((lo * 0x9E37u) & 0xFFFFu) << 16), d, bad);
  }
  EXPECT_EQ(bad, 0);
}

TEST(IndexerOperands, RandomWordsAndTheUnshiftedTables) {
  std::mt19937 rng(5);
  int64_t bad = 0;
  for (int i = 0; i < 100000; ++i)
    expect_word(static_cast<uint32_t>(rng()), i % (kMaxAlignShift + 1), bad);
  EXPECT_EQ(bad, 0);
  // d = 0: P = {0, 2, 3, 4 | 5, 7, 9, 13}, N = {0, -1, -2, -3 | -4, -6, -8, -12}.
  EXPECT_EQ(pn_table_word(0, 0), 0x04030200u);
  EXPECT_EQ(pn_table_word(0, 1), 0x0D090705u);
  EXPECT_EQ(pn_table_word(0, 2), 0xFDFEFF00u);
  EXPECT_EQ(pn_table_word(0, 3), 0xF4F8FAFCu);
}

}  // namespace
}  // namespace di::indexer_detail
