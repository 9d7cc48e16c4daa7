// Weight decoding (dense BF16/F32, FP8 32x32 blocks, FP4 rows) checked against hand-decoded
// values and an independent decoder written from the format definitions; linear() checked
// against a naive double loop on integer-valued inputs (every product and partial sum is exact,
// so both precisions must agree bit for bit) and for batch invariance.

#include "kernels/cpu/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"

namespace di::cpu {
namespace {

template <typename T>
class LinearTest : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(LinearTest, Precisions);

template <typename E>
ConstTensorView view(const std::vector<E>& v, DType dtype, Shape shape) {
  return ConstTensorView{reinterpret_cast<const std::byte*>(v.data()), dtype, std::move(shape)};
}

// e4m3fn from its definition: exponent field 0 -> mant * 2^-9, else (8 + mant) * 2^(exp - 10).
double e4m3_by_definition(uint8_t c) {
  const int exp = (c >> 3) & 0xF;
  const int mant = c & 0x7;
  const double mag = exp == 0 ? std::ldexp(mant, -9) : std::ldexp(8 + mant, exp - 10);
  return (c & 0x80) != 0 ? -mag : mag;
}

// e2m1 from its definition: codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
double e2m1_by_definition(uint8_t n) {
  static constexpr double kGrid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (n & 0x8) != 0 ? -kGrid[n & 0x7] : kGrid[n & 0x7];
}

template <typename T>
std::vector<T> decode_all(const WeightRef& w) {
  std::vector<T> out(static_cast<size_t>(w.rows * w.cols));
  decode_rows(w, 0, w.rows, out.data());
  return out;
}

template <typename T>
void expect_bitwise(const T* got, const T* want, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(got[i], want[i]) << "element " << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << "sign of element " << i;
  }
}

// BF16 bits -> value: 0x3F80 = 1, 0xC040 = -3, 0x3F81 = 1 + 2^-7, 0x0001 = 2^-133 (the smallest
// bf16 subnormal: bit 16 of an fp32), 0x8000 = -0, 0x7F7F = (2 - 2^-7) * 2^127.
TYPED_TEST(LinearTest, DecodeDenseBf16) {
  using T = TypeParam;
  const std::vector<uint16_t> w = {0x3F80, 0xC040, 0x3F81, 0x0001, 0x8000, 0x7F7F};
  const WeightRef ref = dense_weight(view(w, DType::kBF16, Shape{2, 3}), "w");
  const auto got = decode_all<T>(ref);
  const std::vector<T> want = {T(1),
                               T(-3),
                               T(1) + std::ldexp(T(1), -7),
                               static_cast<T>(std::ldexp(1.0f, -133)),
                               T(-0.0),
                               static_cast<T>(std::ldexp(2.0f - std::ldexp(1.0f, -7), 127))};
  expect_bitwise(got.data(), want.data(), want.size());
  // Row 1 alone.
  std::vector<T> row(3);
  decode_rows(ref, 1, 2, row.data());
  expect_bitwise(row.data(), want.data() + 3, 3);
}

// F32 weights are taken as they are (the float value, exactly, in either precision).
TYPED_TEST(LinearTest, DecodeDenseF32) {
  using T = TypeParam;
  const std::vector<float> w = {0.1f, -2.5f, 1e-40f, 3.4e38f};
  const auto got = decode_all<T>(dense_weight(view(w, DType::kF32, Shape{2, 2}), "w"));
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_EQ(got[i], static_cast<T>(w[i]));
  EXPECT_EQ(static_cast<double>(got[0]), 0.100000001490116119384765625);  // fp32(0.1), exactly
}

// FP8 with 32x32 blocks on a 40 x 48 matrix: scale [2, 2] = {1, 2; 2^-7, 8} (bytes 127, 128, 120,
// 130). Hand spots: w[0][0] = 0x38 (1.0) * 1 = 1; w[0][33] = 0x38 * 2 = 2; w[33][0] = 0x7E (448)
// * 2^-7 = 3.5; w[39][47] = 0x81 (-2^-9) * 8 = -2^-6; w[1][1] = 0x80 (-0) -> -0.
TYPED_TEST(LinearTest, DecodeFp8BlocksAndRowSlices) {
  using T = TypeParam;
  constexpr int64_t kRows = 40, kCols = 48;
  std::vector<uint8_t> w(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      auto code = static_cast<uint8_t>((r * 7 + c * 3) & 0xFF);
      if ((code & 0x7F) == 0x7F) code = 0x41;  // no NaN codes
      w[static_cast<size_t>(r * kCols + c)] = code;
    }
  }
  w[0] = 0x38;
  w[33] = 0x38;
  w[33 * kCols] = 0x7E;
  w[39 * kCols + 47] = 0x81;
  w[1 * kCols + 1] = 0x80;
  const std::vector<uint8_t> s = {127, 128, 120, 130};
  const WeightRef ref = fp8_block_weight(view(w, DType::kF8E4M3, Shape{kRows, kCols}),
                                         view(s, DType::kF8E8M0, Shape{2, 2}), 32, 32, "w");
  const auto got = decode_all<T>(ref);
  auto at = [&](int64_t r, int64_t c) { return got[static_cast<size_t>(r * kCols + c)]; };
  EXPECT_EQ(at(0, 0), T(1));
  EXPECT_EQ(at(0, 33), T(2));
  EXPECT_EQ(at(33, 0), T(3.5));
  EXPECT_EQ(at(39, 47), -std::ldexp(T(1), -6));
  EXPECT_EQ(at(1, 1), T(0));
  EXPECT_TRUE(std::signbit(at(1, 1)));
  // Every element against the definition.
  const double block_scale[2][2] = {{1.0, 2.0}, {0x1p-7, 8.0}};
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const double want =
          e4m3_by_definition(w[static_cast<size_t>(r * kCols + c)]) * block_scale[r / 32][c / 32];
      ASSERT_EQ(at(r, c), static_cast<T>(want)) << r << "," << c;
    }
  }
  // Rows [33, 35) of the whole matrix, and the 8-row tail [32, 40) as a weight of its own.
  std::vector<T> part(2 * kCols);
  decode_rows(ref, 33, 35, part.data());
  expect_bitwise(part.data(), got.data() + 33 * kCols, part.size());
  const WeightRef tail = ref.slice_rows(32, 40);
  EXPECT_EQ(tail.rows, 8);
  const auto tail_rows = decode_all<T>(tail);
  expect_bitwise(tail_rows.data(), got.data() + 32 * kCols, tail_rows.size());
  // A slice must start on a scale block.
  EXPECT_THROW(ref.slice_rows(16, 40), Error);
}

// FP4 rows: 2 x 64, packed [2, 32] bytes (low nibble = even column), scales [2, 2] =
// {1, 0.5; 4, 2^-127} (bytes 127, 126, 129, 0).
// Row 0: byte 0 = (lo 0x2, hi 0xF) -> [1, -6]; byte 1 = (0x8, 0x7) -> [-0, 6];
//        byte 16 = (0x3, 0x9) -> [1.5, -0.5] * 0.5 = [0.75, -0.25] (columns 32, 33).
// Row 1: byte 0 = (0x5, 0x1) -> [3, 0.5] * 4 = [12, 2];
//        byte 20 = (0xB, 0x4) -> [-1.5, 2] * 2^-127 = [-1.5 * 2^-127, 2^-126] (columns 40, 41).
// Every other byte is 0 -> +0.
TYPED_TEST(LinearTest, DecodeFp4RowsNibblesAndNegativeZero) {
  using T = TypeParam;
  std::vector<uint8_t> w(2 * 32, 0);
  w[0] = 0xF2;
  w[1] = 0x78;
  w[16] = 0x93;
  w[32 + 0] = 0x15;
  w[32 + 20] = 0x4B;
  const std::vector<uint8_t> s = {127, 126, 129, 0};
  const WeightRef ref =
      fp4_row_weight(view(w, DType::kI8, Shape{2, 32}), view(s, DType::kF8E8M0, Shape{2, 2}), "w");
  ASSERT_EQ(ref.cols, 64);
  const auto got = decode_all<T>(ref);
  std::vector<T> want(128, T(0));
  want[0] = T(1);
  want[1] = T(-6);
  want[2] = T(-0.0);
  want[3] = T(6);
  want[32] = T(0.75);
  want[33] = T(-0.25);
  want[64 + 0] = T(12);
  want[64 + 1] = T(2);
  want[64 + 40] = static_cast<T>(-1.5f * std::ldexp(1.0f, -127));
  want[64 + 41] = static_cast<T>(std::ldexp(1.0f, -126));
  expect_bitwise(got.data(), want.data(), want.size());
  const auto row1 = decode_all<T>(ref.slice_rows(1, 2));
  expect_bitwise(row1.data(), want.data() + 64, 64);
}

// Naive reference in double; with integer activations and weights that are small multiples of
// 2^-2 every product and every partial sum is exact in float too, so the results must be equal.
template <typename T>
std::vector<T> naive_linear(const std::vector<T>& x, int64_t m, const std::vector<T>& w, int64_t n,
                            int64_t k) {
  std::vector<T> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c)
        acc += static_cast<double>(x[static_cast<size_t>(i * k + c)]) *
               static_cast<double>(w[static_cast<size_t>(r * k + c)]);
      y[static_cast<size_t>(i * n + r)] = static_cast<T>(acc);
    }
  }
  return y;
}

template <typename T>
std::vector<T> small_integers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<T> v(n);
  for (auto& e : v)
    e = static_cast<T>(d(rng));
  return v;
}

// 37 output rows: two full 16-row blocks and a 5-row tail, groups of 4 and a remainder.
TYPED_TEST(LinearTest, DenseMatchesNaiveLoopExactly) {
  using T = TypeParam;
  constexpr int64_t kM = 3, kN = 37, kK = 50;
  const auto wf = small_integers<float>(kN * kK, 1);
  const auto x = small_integers<T>(kM * kK, 2);
  const WeightRef ref = dense_weight(view(wf, DType::kF32, Shape{kN, kK}), "w");
  std::vector<T> y(kM * kN);
  linear(x.data(), kM, ref, y.data());
  const std::vector<T> wt(wf.begin(), wf.end());
  const auto want = naive_linear(x, kM, wt, kN, kK);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(y[i], want[i]) << i;
  // Hand spot: y[0][0] = sum_c x[0][c] * w[0][c].
  double h = 0;
  for (int64_t c = 0; c < kK; ++c)
    h += static_cast<double>(x[static_cast<size_t>(c)]) * wf[static_cast<size_t>(c)];
  EXPECT_EQ(static_cast<double>(y[0]), h);
}

// FP4 weights: nibbles with scales 2^-1..2^1, so the weights are multiples of 0.25 up to 12.
TYPED_TEST(LinearTest, Fp4MatchesNaiveLoopExactly) {
  using T = TypeParam;
  constexpr int64_t kM = 2, kN = 37, kK = 64;
  std::mt19937 rng(3);
  std::vector<uint8_t> w(kN * kK / 2), s(kN * 2);
  for (auto& b : w)
    b = static_cast<uint8_t>(rng() & 0xFF);
  for (auto& b : s)
    b = static_cast<uint8_t>(126 + rng() % 3);
  const WeightRef ref = fp4_row_weight(view(w, DType::kI8, Shape{kN, kK / 2}),
                                       view(s, DType::kF8E8M0, Shape{kN, 2}), "w");
  std::vector<T> wt(kN * kK);
  for (int64_t r = 0; r < kN; ++r) {
    for (int64_t c = 0; c < kK; ++c) {
      const uint8_t byte = w[static_cast<size_t>(r * kK / 2 + c / 2)];
      const auto nib = static_cast<uint8_t>(c % 2 == 0 ? byte & 0xF : byte >> 4);
      wt[static_cast<size_t>(r * kK + c)] = static_cast<T>(
          e2m1_by_definition(nib) * std::ldexp(1.0, s[static_cast<size_t>(r * 2 + c / 32)] - 127));
    }
  }
  const auto x = small_integers<T>(kM * kK, 4);
  std::vector<T> y(kM * kN);
  linear(x.data(), kM, ref, y.data());
  const auto want = naive_linear(x, kM, wt, kN, kK);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(y[i], want[i]) << i;
}

// A row's output does not depend on how many rows are in the batch (m = 1, 7, 64; 64 x 64 x 256
// takes the OpenMP path, the others the serial one). Random non-integer data, so summation
// order would show.
TYPED_TEST(LinearTest, BatchInvariant) {
  using T = TypeParam;
  constexpr int64_t kN = 64, kK = 256, kMaxM = 64;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> wf(kN * kK);
  for (auto& e : wf)
    e = d(rng);
  std::vector<T> x(kMaxM * kK);
  for (auto& e : x)
    e = static_cast<T>(d(rng)) / T(3);
  const WeightRef ref = dense_weight(view(wf, DType::kF32, Shape{kN, kK}), "w");
  std::vector<T> y64(kMaxM * kN), y7(7 * kN), y1(kN);
  linear(x.data(), kMaxM, ref, y64.data());
  linear(x.data(), 7, ref, y7.data());
  EXPECT_EQ(std::memcmp(y7.data(), y64.data(), y7.size() * sizeof(T)), 0);
  for (int64_t i : {0, 6, 31, 63}) {
    linear(x.data() + i * kK, 1, ref, y1.data());
    EXPECT_EQ(std::memcmp(y1.data(), y64.data() + i * kN, y1.size() * sizeof(T)), 0) << "row " << i;
  }
}

}  // namespace
}  // namespace di::cpu
