#include "common/fast_div.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace di {
namespace {

// Numerators around every multiple of d up to `limit`, plus the 31-bit extremes.
void expect_exact(uint32_t d, uint32_t limit) {
  const FastDivU31 f(d);
  int64_t bad = 0;
  auto check = [&](uint32_t n) {
    if (f.div(n) != n / d && bad++ < 4) ADD_FAILURE() << n << " / " << d << ": got " << f.div(n);
  };
  for (uint64_t k = 0; k * d <= limit; ++k) {
    const uint32_t m = static_cast<uint32_t>(k * d);
    check(m);
    if (m > 0) check(m - 1);
  }
  constexpr uint32_t kMax = 0x7FFFFFFFu;
  for (uint32_t n : {kMax, kMax - 1, kMax - d + 1, kMax / d * d, kMax / d * d - 1})
    check(n);
  EXPECT_EQ(bad, 0) << "divisor " << d;
}

TEST(FastDivU31, EverySmallDivisorAroundEveryMultiple) {
  for (uint32_t d = 1; d <= 4096; ++d)
    expect_exact(d, 1u << 20);
}

TEST(FastDivU31, LargeAndPowerOfTwoDivisors) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> dd(4097, 0x7FFFFFFFu);
  for (int i = 0; i < 200; ++i)
    expect_exact(dd(rng), 1u << 24);
  for (uint32_t l = 0; l < 31; ++l)
    expect_exact(1u << l, 1u << 22);
  expect_exact(0x7FFFFFFFu, 0x7FFFFFFFu);
}

TEST(FastDivU31, RandomNumeratorsAndDivisors) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<uint32_t> nd(0, 0x7FFFFFFFu);
  int64_t bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t d = 1 + nd(rng) % (i % 2 == 0 ? 100000u : 0x7FFFFFFFu);
    const uint32_t n = nd(rng);
    if (FastDivU31(d).div(n) != n / d) ++bad;
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace di
