// The KV cache entry packers: unpack(pack(x)) equals the reference's in-place fake-quant of x bit
// for bit, the byte layout is the documented one, and wrong sizes are rejected.

#include "kernels/cpu/kv_pack.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cpu/quant.h"
#include "kernels/params/kv_cache.h"

namespace di::cpu {
namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-12.0f, 6.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = d(rng) * std::exp2(mag(rng));  // magnitudes spread over ~18 binades
  for (size_t i = 0; i < n; i += 37)
    v[i] = 0.0f;
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(KvPack, SwaEntryMatchesActQuant) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto x = random_values(kKvDim, seed);
    std::vector<uint8_t> e(kSwaEntryBytes);
    pack_swa_entry(x, e);
    std::vector<float> got(kKvDim), want = x;
    unpack_swa_entry(e, got);
    act_quant_e4m3(std::span<float>(want), 32);
    EXPECT_TRUE(bitwise_equal(got, want)) << "seed " << seed;
    // Layout: the scale of block 3 is at byte 512 + 3; value 100 = code[100] * scale[3].
    EXPECT_EQ(got[100], e4m3_to_float(e[100]) * e8m0_to_float(e[kKvDim + 3]));
  }
}

TEST(KvPack, CompressedEntryMatchesFp4E4m3) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto x = random_values(kKvDim, 100 + seed);
    std::vector<uint8_t> e(kCompEntryBytes);
    pack_comp_entry(x, e);
    std::vector<float> got(kKvDim), want = x;
    unpack_comp_entry(e, got);
    fp4_quant_e4m3(std::span<float>(want), 16);
    EXPECT_TRUE(bitwise_equal(got, want)) << "seed " << seed;
    // Value 33 is the high nibble of byte 16, scaled by the e4m3 scale of block 2 (byte 256 + 2).
    EXPECT_EQ(got[33], e2m1_to_float(e2m1_hi(e[16])) * e4m3_to_float(e[kKvDim / 2 + 2]));
  }
}

TEST(KvPack, IndexKeyMatchesFp4Ue8m0) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto x = random_values(kIndexDim, 200 + seed);
    std::vector<uint8_t> e(kIndexKeyBytes);
    pack_index_key(x, e);
    std::vector<float> got(kIndexDim), want = x;
    unpack_index_key(e, got);
    fp4_quant_ue8m0(std::span<float>(want), 32);
    EXPECT_TRUE(bitwise_equal(got, want)) << "seed " << seed;
    EXPECT_EQ(got[64], e2m1_to_float(e2m1_lo(e[32])) * e8m0_to_float(e[kIndexDim / 2 + 2]));
  }
}

TEST(KvPack, WrongSizesAreRejected) {
  std::vector<float> x(kKvDim);
  std::vector<uint8_t> e(kSwaEntryBytes - 1);
  EXPECT_THROW(pack_swa_entry(x, e), Error);
  std::vector<uint8_t> c(kCompEntryBytes);
  std::vector<float> short_out(kKvDim - 1);
  EXPECT_THROW(unpack_comp_entry(c, short_out), Error);
  std::vector<uint8_t> k(kIndexKeyBytes);
  EXPECT_THROW(pack_index_key(x, k), Error);  // 512 values for a 128-wide key
}

TEST(KvPack, PagedEntryAddressing) {
  std::vector<uint8_t> pool(8 * 1000);
  const int32_t pages[] = {3, 1, 7, 7, 2, 0};  // two rows of 3 page ids
  PagedTable t;
  t.pool = pool.data();
  t.page_bytes = 1000;
  t.pages = pages;
  t.pages_stride = 3;
  t.entry_bytes = kSwaEntryBytes;
  t.entries_per_page = 1000 / kSwaEntryBytes;  // 1: a 528-byte entry never straddles a page
  EXPECT_EQ(paged_entry(t, 0, 0), pool.data() + 3000);
  EXPECT_EQ(paged_entry(t, 1, 2), pool.data() + 0);
  t.entry_bytes = kIndexKeyBytes;
  t.entries_per_page = 1000 / kIndexKeyBytes;  // 14
  EXPECT_EQ(paged_entry(t, 0, 15), pool.data() + 1000 + 1 * kIndexKeyBytes);
  EXPECT_EQ(paged_entry(t, 1, 29), pool.data() + 0 + 1 * kIndexKeyBytes);
  EXPECT_EQ(paged_entry(t, 1, 13), pool.data() + 7000 + 13 * kIndexKeyBytes);
}

}  // namespace
}  // namespace di::cpu
