#include "sampling/philox.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace di {
namespace {

struct Kat {
  Philox4x32Counter ctr;
  Philox4x32Key key;
  uint32_t expected[4];
};

// Random123 tests/kat_vectors (github.com/DEShawResearch/random123), lines "philox4x32 10 ..."
// and "philox4x32 7 ...": counter (4 words), key (2 words), expected output (4 words).
constexpr Kat kKat10[] = {
    {{{0, 0, 0, 0}}, {{0, 0}}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};
constexpr Kat kKat7[] = {
    {{{0, 0, 0, 0}}, {{0, 0}}, {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
};

// The generator is constexpr: the first vector is checked at compile time too.
static_assert(philox4x32(Philox4x32Counter{{0, 0, 0, 0}}, Philox4x32Key{{0, 0}}).v[0] ==
              0x6627e8d5u);

TEST(Philox, Random123KnownAnswers10Rounds) {
  for (const Kat& k : kKat10) {
    const Philox4x32Counter out = philox4x32<10>(k.ctr, k.key);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out.v[i], k.expected[i]) << "word " << i;
  }
}

TEST(Philox, Random123KnownAnswers7Rounds) {
  for (const Kat& k : kKat7) {
    const Philox4x32Counter out = philox4x32<7>(k.ctr, k.key);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out.v[i], k.expected[i]) << "word " << i;
  }
}

TEST(Philox, NoiseLayoutIsSeedKeyAndPositionLaneCounter) {
  const uint64_t seed = 0x0123456789abcdefull;
  const uint64_t position = 0x0000000500000007ull;
  for (uint64_t lane : {0ull, 1ull, 2ull, 3ull, 4ull, 129279ull}) {
    const Philox4x32Counter block =
        philox4x32(Philox4x32Counter{{static_cast<uint32_t>(lane / 4), 7u, 5u, 2u}},
                   Philox4x32Key{{0x89abcdefu, 0x01234567u}});
    EXPECT_EQ(noise_bits(seed, NoiseStream::kAcceptance, position, lane), block.v[lane % 4]);
  }
}

TEST(Philox, UniformIsStrictlyInsideUnitInterval) {
  EXPECT_EQ(uniform_from_bits(0), 0x1p-33);
  EXPECT_EQ(uniform_from_bits(0xffffffffu), 1.0 - 0x1p-33);
  EXPECT_GT(uniform_from_bits(0), 0.0);
  EXPECT_LT(uniform_from_bits(0xffffffffu), 1.0);
}

TEST(Philox, NoiseDependsOnEveryCoordinate) {
  const double base = noise_uniform(42, NoiseStream::kSample, 100, 17);
  EXPECT_EQ(base, noise_uniform(42, NoiseStream::kSample, 100, 17));  // pure function
  EXPECT_NE(base, noise_uniform(43, NoiseStream::kSample, 100, 17));
  EXPECT_NE(base, noise_uniform(42ull | (1ull << 40), NoiseStream::kSample, 100, 17));
  EXPECT_NE(base, noise_uniform(42, NoiseStream::kDraft, 100, 17));
  EXPECT_NE(base, noise_uniform(42, NoiseStream::kSample, 101, 17));
  EXPECT_NE(base, noise_uniform(42, NoiseStream::kSample, 100 + (1ull << 32), 17));
  EXPECT_NE(base, noise_uniform(42, NoiseStream::kSample, 100, 16));
  EXPECT_NE(base, noise_uniform(42, NoiseStream::kSample, 100, 21));
}

TEST(Philox, UniformMomentsAndNoCollisions) {
  // 2^16 draws over lanes and positions: mean 1/2, variance 1/12, (almost) all bits distinct.
  double sum = 0, sum_sq = 0;
  std::set<uint32_t> seen;
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const uint64_t lane = static_cast<uint64_t>(i % 1024);
    const uint64_t pos = static_cast<uint64_t>(i / 1024);
    const uint32_t bits = noise_bits(7, NoiseStream::kSample, pos, lane);
    seen.insert(bits);
    const double u = uniform_from_bits(bits);
    sum += u;
    sum_sq += u * u;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // Standard error of the mean is sqrt(1/12/n) ~ 0.0011; these bounds are > 4 sigma.
  EXPECT_NEAR(mean, 0.5, 0.005);
  EXPECT_NEAR(var, 1.0 / 12.0, 0.003);
  EXPECT_GE(seen.size(), static_cast<size_t>(n) - 5);  // birthday bound: ~0.5 expected
}

}  // namespace
}  // namespace di
