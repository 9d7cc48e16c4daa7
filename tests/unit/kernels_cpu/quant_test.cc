// Hand-derived cases for the three quantisation simulations (delta spec §3.2, fixture README §5.1).
// Notation: C8 = fp32(1/448) = 0x3B124925 = 9586981 * 2^-32, and 7 * 9586981 = 2^26 + 3, so
// fp32(448 * 2^k * C8) = fp32((2^26 + 3) * 2^(k-26)) = 2^k: an amax of exactly 448 * 2^k gives
// s = 2^k. C6 = fp32(1/6) = 0x3E2AAAAB = 11184811 * 2^-26 and 6 * 11184811 = 2^26 + 2, so
// fp32(6 * 2^k * C6) = fp32(2^k * (1 + 2^-25)) = 2^k (the excess is below half an ulp, 2^-24).
// e4m3: step 2^(e-3) in [2^e, 2^(e+1)), subnormal step 2^-9 below 2^-6, max 448.
// e2m1 grid {0, 0.5, 1, 1.5, 2, 3, 4, 6}; ties go to the even code (0, 1, 2, 4 win).

#include "kernels/cpu/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

namespace di::cpu {
namespace {

template <typename T>
class QuantTest : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(QuantTest, Precisions);

template <typename T>
T p2(int e) {
  return std::ldexp(T(1), e);
}

// Bitwise equality, so that -0.0 and +0.0 are told apart.
template <typename T>
void expect_same(const std::vector<T>& got, const std::vector<T>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "element " << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << "sign of element " << i;
  }
}

template <typename T>
std::vector<T> act_quant(std::vector<T> x, int block) {
  act_quant_e4m3(std::span<T>(x), block);
  return x;
}

template <typename T>
std::vector<T> fp4_ue8m0(std::vector<T> x, int block) {
  fp4_quant_ue8m0(std::span<T>(x), block);
  return x;
}

template <typename T>
std::vector<T> fp4_e4m3(std::vector<T> x, int block) {
  fp4_quant_e4m3(std::span<T>(x), block);
  return x;
}

// ---- act_quant_e4m3 ----

// amax = 56 = 448 * 2^-3 -> s = 2^-3 exactly (header). In units of s:
//   56 -> 448 (max, kept); 2^-12 -> 2^-9 (smallest subnormal, kept);
//   3 * 2^-13 -> 1.5 * 2^-9, a tie between subnormal codes 1 and 2 -> 2 -> 2^-8 * 2^-3 = 2^-11;
//   -1.1875 -> -9.5, a tie between 9 (mantissa 001) and 10 (mantissa 010) -> -10 -> -1.25.
TYPED_TEST(QuantTest, ActQuantAmaxExactly448TimesPowerOfTwo) {
  using T = TypeParam;
  const auto q = act_quant<T>({T(56), p2<T>(-12), 3 * p2<T>(-13), T(-1.1875)}, 4);
  expect_same<T>(q, {T(56), p2<T>(-12), p2<T>(-11), T(-1.25)});
}

// amax = nextafter(56f) = 56 + 2^-18: fp32(a * C8) = 2^-3 + 3 * 2^-29 + 9586981 * 2^-50
// = 2^-3 + ~0.95 * 2^-26, which rounds up to 2^-3 + 2^-26 (ulp 2^-26): mantissa non-zero, so the
// scale doubles to s = 2^-2. Then 56 + 2^-18 -> 224 + 2^-16 -> 224 (step 16) -> 56, and
// 2^-12 -> 2^-10 = half the smallest subnormal, a tie -> 0 (it survived with s = 2^-3 above).
TYPED_TEST(QuantTest, ActQuantAmaxJustAboveDoublesTheScale) {
  using T = TypeParam;
  const T amax = T(56) + p2<T>(-18);
  ASSERT_EQ(static_cast<float>(amax), std::nextafter(56.0f, 100.0f));
  const auto q = act_quant<T>({amax, p2<T>(-12), T(1), T(0)}, 4);
  expect_same<T>(q, {T(56), T(0), T(1), T(0)});
}

// amax = 5e-5 < 1e-4: a = fp32(1e-4), a * C8 = 2.232e-7 lies in (2^-23, 2^-22] -> s = 2^-22.
//   5e-5 / 2^-22 = 209.72 -> 208 (step 16 in [128, 256)) -> 208 * 2^-22 = 13 * 2^-18;
//   3e-7 / 2^-22 = 1.258 -> 1.25 (step 0.125) -> 5 * 2^-24; -0.0 stays -0.0.
// An all-zero block also takes the floor scale and stays zero (no 0/0).
TYPED_TEST(QuantTest, ActQuantFloorsAmaxAt1em4) {
  using T = TypeParam;
  const auto q = act_quant<T>({T(5e-5), T(3e-7), T(-0.0), T(0), T(0), T(0), T(0), T(0)}, 4);
  expect_same<T>(q, {13 * p2<T>(-18), 5 * p2<T>(-24), T(-0.0), T(0), T(0), T(0), T(0), T(0)});
}

// amax = 448 -> s = 1; every value is in the scaled domain already.
//   17 (16 | 18, mantissas 000 | 001) -> 16; 19 (18 | 20) -> 20; -17 -> -16;
//   1.0625 (1 | 1.125) -> 1; 1.1875 (1.125 | 1.25) -> 1.25;
//   3 * 2^-10 = 1.5 subnormal steps -> 2 * 2^-9 = 2^-8; 2^-10 = half a step -> 0;
//   15 * 2^-10 = 7.5 steps, a tie between the largest subnormal 7 * 2^-9 and the smallest normal
//   8 * 2^-9 = 2^-6 (code 8, even) -> 2^-6; -448 is the clamp edge and is kept.
TYPED_TEST(QuantTest, ActQuantMidpointsTieToEven) {
  using T = TypeParam;
  const auto q = act_quant<T>({T(448), T(17), T(19), T(-17), T(1.0625), T(1.1875), 3 * p2<T>(-10),
                               p2<T>(-10), 15 * p2<T>(-10), T(-448)},
                              10);
  expect_same<T>(
      q, {T(448), T(16), T(20), T(-16), T(1), T(1.25), p2<T>(-8), T(0), p2<T>(-6), T(-448)});
}

// n = 6 with blocks of 4: the last block [0.3, 2^-12] has its own scale. 0.3 / 448 = 6.7e-4 lies
// in (2^-11, 2^-10] -> s = 2^-10: 0.3 -> 307.2 -> 320 (step 32 in [256, 448]) -> 0.3125, and
// 2^-12 -> 0.25 (a normal e4m3, exact) -> 2^-12. With the first block's scale (1) 2^-12 would
// underflow to 0.
TYPED_TEST(QuantTest, ActQuantPartialLastBlockHasItsOwnScale) {
  using T = TypeParam;
  const auto q = act_quant<T>({T(448), T(1), T(-1), T(2), T(0.3), p2<T>(-12)}, 4);
  expect_same<T>(q, {T(448), T(1), T(-1), T(2), T(0.3125), p2<T>(-12)});
}

// Decided on the double: 17 + 2^-30 is above the 16 | 18 midpoint (-> 18) although its fp32
// rounding, 17, is a tie (-> 16); 17 - 2^-30 -> 16. s = 1 (amax 448).
TEST(QuantDoubleTest, ActQuantRoundsTheDoubleValueNotItsFloatRounding) {
  ASSERT_EQ(static_cast<float>(17.0 + 0x1p-30), 17.0f);
  const auto q = act_quant<double>({448.0, 17.0 + 0x1p-30, 17.0 - 0x1p-30, 17.0}, 4);
  expect_same<double>(q, {448.0, 18.0, 16.0, 16.0});
}

// amax = 56 + 2^-30 (double): fp32(amax) = 56 -> s = 2^-3 (2^-12 survives as above), and
// (56 + 2^-30) / s = 448 + 2^-27 is clamped to 448 -> 56.
TEST(QuantDoubleTest, ActQuantScaleFromFp32AmaxAndClamp) {
  const auto q = act_quant<double>({56.0 + 0x1p-30, 0x1p-12, -56.0, 0.0}, 4);
  expect_same<double>(q, {56.0, 0x1p-12, -56.0, 0.0});
}

// ---- fp4_quant_ue8m0 ----

// Block 1: amax 6 -> s = 1 (header): the e2m1 ties of the spec.
// Block 2: amax 3 -> fp32(3 * C6) = 0.5 -> s = 0.5; in units of s the values are
// -6, -0.25, 0.75, -1.25, 1.75, 2.5, -3.5, 5 -> -6, -0, 1, -1, 2, 2, -4, 4.
TYPED_TEST(QuantTest, Fp4Ue8m0TiesToEven) {
  using T = TypeParam;
  const auto q =
      fp4_ue8m0<T>({T(6), T(0.25), T(0.75), T(1.25), T(1.75), T(2.5), T(3.5), T(5), T(-3),
                    T(-0.125), T(0.375), T(-0.625), T(0.875), T(1.25), T(-1.75), T(2.5)},
                   8);
  expect_same<T>(q, {T(6), T(0), T(1), T(1), T(2), T(2), T(4), T(4), T(-3), T(-0.0), T(0.5),
                     T(-0.5), T(1), T(1), T(-2), T(2)});
}

// Non-ties: 0.26 -> 0.5, 2.6 -> 3, 4.9 -> 4 (|4.9 - 4| < |6 - 4.9|), 5.1 -> 6. s = 1.
TYPED_TEST(QuantTest, Fp4Ue8m0RoundsToNearest) {
  using T = TypeParam;
  const auto q = fp4_ue8m0<T>({T(6), T(0.26), T(2.6), T(4.9), T(5.1), T(-0.74)}, 6);
  expect_same<T>(q, {T(6), T(0.5), T(3), T(4), T(6), T(-0.5)});
}

// amax = 3 * 2^-128 < 6 * 2^-126: a = 6 * 2^-126, fp32(a * C6) = 2^-126 (1 + 2^-25) -> 2^-126
// (ulp 2^-149) -> s = 2^-126. 3 * 2^-128 -> 0.75 -> 1 -> 2^-126; 2^-127 -> 0.5 -> 2^-127;
// 2^-128 -> 0.25 -> 0 (without the floor s would be 2^-129 and 2^-128 would survive).
// The all-zero block stays zero.
TYPED_TEST(QuantTest, Fp4Ue8m0FloorsAmaxAt6Times2Pow126) {
  using T = TypeParam;
  const auto q =
      fp4_ue8m0<T>({3 * p2<T>(-128), p2<T>(-127), p2<T>(-128), T(0), T(0), T(0), T(0), T(0)}, 4);
  expect_same<T>(q, {p2<T>(-126), p2<T>(-127), T(0), T(0), T(0), T(0), T(0), T(0)});
}

// 1e-300 is 0 in fp32, so the block takes the floor scale 2^-126 and rounds to +-0.
TEST(QuantDoubleTest, Fp4Ue8m0BelowFp32Range) {
  const auto q = fp4_ue8m0<double>({1e-300, -1e-300}, 32);
  expect_same<double>(q, {0.0, -0.0});
}

// ---- fp4_quant_e4m3 (block 16) ----

// Block 1, amax 5: fp32(5 / 6) = 0.83333 is no e4m3 value; in [0.5, 1) the step is 1/16, so the
// neighbours are 13/16 and 14/16 and the nearer is s = 13/16 = 0.8125 (neither 1 = pow2ceil nor
// 5/6). x / s (one rounded division) and e2m1:
//   5 -> 6.15 -> clamp 6 -> 4.875;  -5 -> -4.875;  1 -> 1.23 -> 1 -> 0.8125;
//   2.03125 = 2.5 s exactly -> 2 -> 1.625;  0.203125 = 0.25 s -> 0;  -0.203125 -> -0;
//   1.421875 = 1.75 s -> 2 -> 1.625;  4.0625 = 5 s -> 4 -> 3.25;  2.84375 = 3.5 s -> 4 -> 3.25;
//   -0.609375 = -0.75 s -> -1 -> -0.8125;  1.015625 = 1.25 s -> 1 -> 0.8125.
// Block 2 (partial, 4 values), amax 3 * 2^-10 < 6 * 2^-9: a / 6 = 2^-9 = the smallest e4m3
// subnormal -> s = 2^-9 (without the floor a / 6 = 2^-11 would round to an e4m3 zero).
//   3 * 2^-10 -> 1.5 -> 3 * 2^-10;  2^-11 -> 0.25 -> 0;  3 * 2^-11 -> 0.75 -> 1 -> 2^-9.
TYPED_TEST(QuantTest, Fp4E4m3ScaleIsE4m3RoundedAndFloored) {
  using T = TypeParam;
  const auto q =
      fp4_e4m3<T>({T(5),         T(-5),          T(1),       T(2.03125),     T(0.203125),
                   T(-0.203125), T(1.421875),    T(4.0625),  T(2.84375),     T(-0.609375),
                   T(1.015625),  T(0),           T(0),       T(0),           T(0),
                   T(0),         3 * p2<T>(-10), p2<T>(-11), 3 * p2<T>(-11), -3 * p2<T>(-10)},
                  16);
  expect_same<T>(
      q, {T(4.875), T(-4.875), T(0.8125),      T(1.625),  T(0),      T(-0.0),        T(1.625),
          T(3.25),  T(3.25),   T(-0.8125),     T(0.8125), T(0),      T(0),           T(0),
          T(0),     T(0),      3 * p2<T>(-10), T(0),      p2<T>(-9), -3 * p2<T>(-10)});
}

// amax = 5.0625: a / 6 = 27/32 = 0.84375 exactly, the midpoint of 13/16 (mantissa 101) and
// 14/16 (mantissa 110) -> s = 0.875 (even). 5.0625 / 0.875 = 5.79 -> 6 -> 5.25;
// 0.4375 = 0.5 s -> 0.4375; 1.3125 = 1.5 s -> 1.3125.
TYPED_TEST(QuantTest, Fp4E4m3ScaleTieGoesToEvenMantissa) {
  using T = TypeParam;
  const auto q = fp4_e4m3<T>({T(5.0625), T(0.4375), T(1.3125), T(0)}, 16);
  expect_same<T>(q, {T(5.25), T(0.4375), T(1.3125), T(0)});
}

// bf16 keeps 8 significant bits (step 2^-7 in [1, 2)): ties go to the even value, anything
// above a tie up; infinities and exact values stay.
TYPED_TEST(QuantTest, RoundBf16NearestTiesToEven) {
  using T = TypeParam;
  std::vector<T> x = {T(1) + p2<T>(-8),
                      T(1) + 3 * p2<T>(-8),
                      T(1) + p2<T>(-8) + p2<T>(-20),
                      -T(1) - p2<T>(-8),
                      T(3),
                      -std::numeric_limits<T>::infinity(),
                      T(255) + T(0.5)};
  round_bf16(std::span<T>(x));
  expect_same(x, {T(1), T(1) + p2<T>(-6), T(1) + p2<T>(-7), -T(1), T(3),
                  -std::numeric_limits<T>::infinity(), T(256)});
}

// The double value is rounded once: 1 + 2^-8 + 2^-40 is above the tie (its float rounding,
// 1 + 2^-8, would be a tie going down to 1).
TEST(QuantDoubleTest, RoundBf16RoundsTheDoubleNotItsFloatRounding) {
  std::vector<double> x = {1.0 + 0x1p-8 + 0x1p-40};
  round_bf16(std::span<double>(x));
  EXPECT_EQ(x[0], 1.0 + 0x1p-7);
}

}  // namespace
}  // namespace di::cpu
