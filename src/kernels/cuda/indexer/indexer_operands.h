#pragma once

// The P / N operand tables of the indexer decode kernel (indexer_score_decode.cu), as plain
// constexpr functions so that a host test can check the algebra the kernel relies on
// (tests/kernels/indexer/indexer_operands_test.cc).
//
// A key code c (bit 3 the sign, bits 0..2 the magnitude index m of e2m1 {0, .5, 1, 1.5, 2, 3, 4,
// 6}) becomes two int8 values through `prmt` (byte n of the result: byte sel & 7 of the 8-byte
// table, or that byte's sign replicated when bit 3 of sel is set):
//   P = prmt(TP_d, c):      c >= 0: (mag(m) << d) + (m > 0);  c < 0: sign of a byte >= 0 = 0
//   N = prmt(TN_d, c ^ 8):  c < 0: -(mag(m) << d);  c >= 0: sign of -(mag(m) << d) = -(m > 0)
// with mag(m) = 2 * e2m1(m) in {0, 1, 2, 3, 4, 6, 8, 12}, so P + N = 2 * e2m1(c) << d for every
// code: the two MMAs with the same query fragments sum to the signed key's dot. d <= 3 keeps
// every byte within [-96, 97].

#include <cstdint>

#if defined(__CUDACC__)
#define DI_INDEXER_OPERANDS_HD __host__ __device__
#else
#define DI_INDEXER_OPERANDS_HD
#endif

namespace di::indexer_detail {

inline constexpr int kMaxAlignShift = 3;

// Word `which` of the tables for alignment shift d (0 .. 3): 0 = TP bytes m = 0..3, 1 = TP
// m = 4..7, 2 / 3 = TN likewise (byte i of word w is entry 4 (w & 1) + i).
DI_INDEXER_OPERANDS_HD constexpr uint32_t pn_table_word(int d, int which) {
  constexpr int kMag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  uint32_t word = 0;
  for (int i = 0; i < 4; ++i) {
    const int m = 4 * (which & 1) + i;
    const int v = kMag[m] << d;
    const int byte = which < 2 ? v + (m > 0 ? 1 : 0) : -v;
    word |= static_cast<uint32_t>(byte & 0xFF) << (8 * i);
  }
  return word;
}

}  // namespace di::indexer_detail
