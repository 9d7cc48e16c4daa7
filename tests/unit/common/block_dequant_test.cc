#include "common/block_dequant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "common/error.h"
#include "common/fp4.h"
#include "common/fp8.h"

namespace di {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed, int lo = 0, int hi = 255) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<uint8_t>(dist(rng));
  return v;
}

ConstTensorView view(const std::vector<uint8_t>& v, DType dtype, Shape shape) {
  return {reinterpret_cast<const std::byte*>(v.data()), dtype, std::move(shape)};
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The definition, element by element, in double (exact): e4m3 * 2^(s - 127).
double fp8_reference(const std::vector<uint8_t>& w, const std::vector<uint8_t>& s, int64_t k,
                     int bn, int bk, int64_t row, int64_t col) {
  const int64_t scale_cols = ceil_div(k, bk);
  const uint8_t sb = s[static_cast<size_t>((row / bn) * scale_cols + col / bk)];
  const double x = e4m3_to_double(w[static_cast<size_t>(row * k + col)]);
  return sb == 0xFF ? std::nan("") : std::ldexp(x, sb - 127);
}

double fp4_reference(const std::vector<uint8_t>& w, const std::vector<uint8_t>& s, int64_t k,
                     int64_t row, int64_t col) {
  const uint8_t byte = w[static_cast<size_t>(row * (k / 2) + col / 2)];
  const uint8_t nibble = col % 2 == 0 ? e2m1_lo(byte) : e2m1_hi(byte);
  const uint8_t sb = s[static_cast<size_t>(row * ceil_div(k, 32) + col / 32)];
  const double x = e2m1_to_float(nibble);
  return sb == 0xFF ? std::nan("") : std::ldexp(x, sb - 127);
}

// Same value, or both NaN.
bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Fp8Case {
  int64_t n, k;
  int bn, bk;
};

class Fp8BlocksTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8BlocksTest, MatchesScalarDefinition) {
  const auto [n, k, bn, bk] = GetParam();
  const Shape scale_shape = fp8_block_scale_shape(n, k, bn, bk);
  ASSERT_EQ(scale_shape, (Shape{ceil_div(n, bn), ceil_div(k, bk)}));
  const auto w = random_bytes(static_cast<size_t>(n * k), 1);  // every code, NaNs included
  // Scales in the bf16-exact range, so all three variants can run on the same data.
  const auto s = random_bytes(static_cast<size_t>(scale_shape.numel()), 2, 3, 246);
  const ConstTensorView wv = view(w, DType::kF8E4M3, {n, k});
  const ConstTensorView sv = view(s, DType::kF8E8M0, scale_shape);

  std::vector<float> f(static_cast<size_t>(n * k));
  std::vector<double> d(f.size());
  std::vector<uint16_t> b(f.size());
  dequant_fp8_blocks(wv, sv, bn, bk, std::span<float>(f));
  dequant_fp8_blocks(wv, sv, bn, bk, std::span<double>(d));
  dequant_fp8_blocks_bf16(wv, sv, bn, bk, b);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t col = 0; col < k; ++col) {
      const size_t i = static_cast<size_t>(row * k + col);
      const double ref = fp8_reference(w, s, k, bn, bk, row, col);
      ASSERT_TRUE(same(d[i], ref)) << row << "," << col;
      ASSERT_TRUE(same(static_cast<double>(f[i]), ref)) << row << "," << col;
      // bf16 is exact here: the same value, and NaN becomes the canonical quiet NaN.
      ASSERT_EQ(b[i], bf16_from_double(ref)) << row << "," << col;
      ASSERT_TRUE(same(static_cast<double>(bf16_to_float(b[i])), ref)) << row << "," << col;
    }
  }

  // A row range converts exactly the same rows.
  const int64_t r0 = n / 3;
  const int64_t r1 = n - n / 4;
  std::vector<uint16_t> part(static_cast<size_t>((r1 - r0) * k));
  dequant_fp8_blocks_bf16(wv, sv, bn, bk, part, {r0, r1});
  EXPECT_EQ(0, std::memcmp(part.data(), b.data() + r0 * k, part.size() * sizeof(uint16_t)));
  std::vector<float> fpart(part.size());
  dequant_fp8_blocks(wv, sv, bn, bk, std::span<float>(fpart), {r0, r1});
  EXPECT_EQ(0, std::memcmp(fpart.data(), f.data() + r0 * k, fpart.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8BlocksTest,
                         ::testing::Values(Fp8Case{64, 96, 32, 32},      // V4.1, exact blocks
                                           Fp8Case{70, 100, 32, 32},     // V4.1, ragged edges
                                           Fp8Case{256, 384, 128, 128},  // V4, exact blocks
                                           Fp8Case{300, 260, 128, 128},  // V4, ragged edges
                                           Fp8Case{5, 77, 1, 32},        // Engram rows, ragged
                                           Fp8Case{3, 64, 1, 32},        // Engram rows
                                           Fp8Case{1, 1, 32, 32}));

struct Fp4Case {
  int64_t n, k;
};

class Fp4RowsTest : public ::testing::TestWithParam<Fp4Case> {};

TEST_P(Fp4RowsTest, MatchesScalarDefinition) {
  const auto [n, k] = GetParam();
  const Shape scale_shape = fp4_row_scale_shape(n, k);
  ASSERT_EQ(scale_shape, (Shape{n, ceil_div(k, 32)}));
  const auto w = random_bytes(static_cast<size_t>(n * k / 2), 3);
  const auto s = random_bytes(static_cast<size_t>(scale_shape.numel()), 4, 0, 252);
  const ConstTensorView wv = view(w, DType::kI8, {n, k / 2});
  const ConstTensorView sv = view(s, DType::kF8E8M0, scale_shape);

  std::vector<float> f(static_cast<size_t>(n * k));
  std::vector<double> d(f.size());
  std::vector<uint16_t> b(f.size());
  dequant_fp4_rows(wv, sv, std::span<float>(f));
  dequant_fp4_rows(wv, sv, std::span<double>(d));
  dequant_fp4_rows_bf16(wv, sv, b);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t col = 0; col < k; ++col) {
      const size_t i = static_cast<size_t>(row * k + col);
      const double ref = fp4_reference(w, s, k, row, col);
      ASSERT_EQ(d[i], ref) << row << "," << col;
      ASSERT_EQ(static_cast<double>(f[i]), ref) << row << "," << col;
      ASSERT_EQ(std::signbit(f[i]), std::signbit(ref)) << row << "," << col;
      ASSERT_EQ(static_cast<double>(bf16_to_float(b[i])), ref) << row << "," << col;
      ASSERT_EQ(b[i], bf16_from_double(ref)) << row << "," << col;
    }
  }
  const int64_t r0 = n / 2;
  std::vector<double> part(static_cast<size_t>((n - r0) * k));
  dequant_fp4_rows(wv, sv, std::span<double>(part), {r0, -1});
  EXPECT_EQ(0, std::memcmp(part.data(), d.data() + r0 * k, part.size() * sizeof(double)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp4RowsTest,
                         ::testing::Values(Fp4Case{4, 64}, Fp4Case{7, 80}, Fp4Case{9, 2},
                                           Fp4Case{33, 160}, Fp4Case{1, 1000}));

// Scale bytes [3, 246] are exactly the ones for which every e4m3 code scales exactly into bf16:
// 2 loses the smallest subnormal, 247 overflows 448.
TEST(DequantBf16ExactnessTest, Fp8ScaleBounds) {
  for (int sb = 0; sb < 255; ++sb) {
    bool exact = true;
    for (int c = 0; c < 256; ++c) {
      if (e4m3_is_nan(static_cast<uint8_t>(c))) continue;
      const float product =
          e4m3_to_float(static_cast<uint8_t>(c)) * e8m0_to_float(static_cast<uint8_t>(sb));
      const double ref = std::ldexp(e4m3_to_double(static_cast<uint8_t>(c)), sb - 127);
      exact = exact && static_cast<double>(bf16_to_float(bf16_from_float(product))) == ref;
    }
    EXPECT_EQ(exact, sb >= kFp8Bf16ExactMinScale && sb <= kFp8Bf16ExactMaxScale) << sb;
  }
}

TEST(DequantBf16ExactnessTest, Fp4ScaleBounds) {
  for (int sb = 0; sb < 255; ++sb) {
    bool exact = true;
    for (int c = 0; c < 16; ++c) {
      const float product =
          e2m1_to_float(static_cast<uint8_t>(c)) * e8m0_to_float(static_cast<uint8_t>(sb));
      const double ref =
          std::ldexp(static_cast<double>(e2m1_to_float(static_cast<uint8_t>(c))), sb - 127);
      exact = exact && static_cast<double>(bf16_to_float(bf16_from_float(product))) == ref;
    }
    EXPECT_EQ(exact, sb <= kFp4Bf16ExactMaxScale) << sb;
  }
}

class DequantErrorsTest : public ::testing::Test {
 protected:
  // A valid 40 x 70 FP8 weight with 32x32 blocks (scale [2, 3]).
  std::vector<uint8_t> w_ = random_bytes(40 * 70, 9);
  std::vector<uint8_t> s_ = random_bytes(6, 10, 100, 140);
  std::vector<float> out_ = std::vector<float>(40 * 70);
  std::vector<uint16_t> out16_ = std::vector<uint16_t>(40 * 70);
  ConstTensorView w() const { return view(w_, DType::kF8E4M3, {40, 70}); }
  ConstTensorView s() const { return view(s_, DType::kF8E8M0, {2, 3}); }
};

TEST_F(DequantErrorsTest, Fp8ValidCallSucceeds) {
  EXPECT_NO_THROW(dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(out_)));
  EXPECT_NO_THROW(dequant_fp8_blocks_bf16(w(), s(), 32, 32, out16_));
}

TEST_F(DequantErrorsTest, Fp8WrongDtypes) {
  const std::string bad_w = error_of([&] {
    dequant_fp8_blocks(view(w_, DType::kU8, {40, 70}), s(), 32, 32, std::span<float>(out_));
  });
  EXPECT_NE(bad_w.find("weight must be F8_E4M3, got U8"), std::string::npos) << bad_w;
  const std::string bad_s = error_of([&] {
    dequant_fp8_blocks(w(), view(s_, DType::kU8, {2, 3}), 32, 32, std::span<float>(out_));
  });
  EXPECT_NE(bad_s.find("scale must be F8_E8M0, got U8"), std::string::npos) << bad_s;
}

TEST_F(DequantErrorsTest, Fp8WrongShapes) {
  const std::string bad_scale = error_of([&] {
    dequant_fp8_blocks(w(), view(s_, DType::kF8E8M0, {3, 2}), 32, 32, std::span<float>(out_));
  });
  EXPECT_NE(bad_scale.find("scale for weight [40, 70] with 32x32 blocks must have shape [2, 3], "
                           "got [3, 2]"),
            std::string::npos)
      << bad_scale;
  const std::string bad_block =
      error_of([&] { dequant_fp8_blocks(w(), s(), 128, 128, std::span<float>(out_)); });
  EXPECT_NE(bad_block.find("with 128x128 blocks must have shape [1, 1], got [2, 3]"),
            std::string::npos)
      << bad_block;
  const std::string rank1 = error_of([&] {
    dequant_fp8_blocks(view(w_, DType::kF8E4M3, {2800}), s(), 32, 32, std::span<float>(out_));
  });
  EXPECT_NE(rank1.find("weight must have shape [N, K], got [2800]"), std::string::npos) << rank1;
  const std::string zero_block =
      error_of([&] { dequant_fp8_blocks(w(), s(), 0, 32, std::span<float>(out_)); });
  EXPECT_NE(zero_block.find("block size must be positive, got 0x32"), std::string::npos)
      << zero_block;
  std::vector<float> small(100);
  const std::string bad_out =
      error_of([&] { dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(small)); });
  EXPECT_NE(bad_out.find("out has 100 elements, expected 2800 (40 rows x K = 70)"),
            std::string::npos)
      << bad_out;
}

TEST_F(DequantErrorsTest, RowRanges) {
  std::vector<float> rows(10 * 70);
  EXPECT_NO_THROW(dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(rows), {30, 40}));
  EXPECT_NO_THROW(dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(), {7, 7}));
  const std::string past_end = error_of([&] {
    dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(rows), {35, 45});
  });
  EXPECT_NE(past_end.find("row range [35, 45) is not inside the weight's 40 rows"),
            std::string::npos)
      << past_end;
  EXPECT_THROW(dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(rows), {-1, 9}), Error);
  EXPECT_THROW(dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(rows), {20, 10}), Error);
  const std::string wrong_size = error_of([&] {
    dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(rows), {0, 9});
  });
  EXPECT_NE(wrong_size.find("out has 700 elements, expected 630 (9 rows x K = 70)"),
            std::string::npos)
      << wrong_size;
}

TEST_F(DequantErrorsTest, Bf16RejectsInexactScales) {
  for (uint8_t bad : {uint8_t{0}, uint8_t{2}, uint8_t{247}, uint8_t{0xFF}}) {
    s_[4] = bad;  // block [1, 1]
    const std::string msg = error_of([&] { dequant_fp8_blocks_bf16(w(), s(), 32, 32, out16_); });
    EXPECT_NE(msg.find(fmt::format("scale byte {} at block [1, 1] is outside [3, 246]", bad)),
              std::string::npos)
        << msg;
    // Rows that do not use the bad block convert fine; float still converts everything.
    std::vector<uint16_t> first_rows(32 * 70);
    EXPECT_NO_THROW(dequant_fp8_blocks_bf16(w(), s(), 32, 32, first_rows, {0, 32}));
    EXPECT_NO_THROW(dequant_fp8_blocks(w(), s(), 32, 32, std::span<float>(out_)));
  }
}

TEST(DequantFp4ErrorsTest, ShapesDtypesAndScales) {
  std::vector<uint8_t> w = random_bytes(4 * 40, 1);  // [4, 40] bytes: K = 80, 3 scales a row
  std::vector<uint8_t> s = random_bytes(4 * 3, 2, 100, 140);
  std::vector<float> out(4 * 80);
  const ConstTensorView wv = view(w, DType::kI8, {4, 40});
  const ConstTensorView sv = view(s, DType::kF8E8M0, {4, 3});
  EXPECT_NO_THROW(dequant_fp4_rows(wv, sv, std::span<float>(out)));
  EXPECT_NO_THROW(dequant_fp4_rows(view(w, DType::kU8, {4, 40}), sv, std::span<float>(out)));

  const std::string bad_w = error_of([&] {
    dequant_fp4_rows(view(w, DType::kF8E4M3, {4, 40}), sv, std::span<float>(out));
  });
  EXPECT_NE(bad_w.find("weight must be I8 (packed e2m1 pairs), got F8_E4M3"), std::string::npos)
      << bad_w;
  const std::string bad_s = error_of([&] {
    dequant_fp4_rows(wv, view(s, DType::kF8E8M0, {4, 2}), std::span<float>(out));
  });
  EXPECT_NE(
      bad_s.find("scale for weight [4, 40] with 1x32 blocks must have shape [4, 3], got [4, 2]"),
      std::string::npos)
      << bad_s;
  std::vector<double> small(4 * 40);
  const std::string bad_out = error_of([&] { dequant_fp4_rows(wv, sv, std::span<double>(small)); });
  EXPECT_NE(bad_out.find("out has 160 elements, expected 320 (4 rows x K = 80)"), std::string::npos)
      << bad_out;

  std::vector<uint16_t> out16(4 * 80);
  s[7] = 253;  // row 2, block 1
  const std::string inexact = error_of([&] { dequant_fp4_rows_bf16(wv, sv, out16); });
  EXPECT_NE(inexact.find("scale byte 253 at block [2, 1] is outside [0, 252]"), std::string::npos)
      << inexact;
  std::vector<uint16_t> two_rows(2 * 80);
  EXPECT_NO_THROW(dequant_fp4_rows_bf16(wv, sv, two_rows, {0, 2}));
}

}  // namespace
}  // namespace di
