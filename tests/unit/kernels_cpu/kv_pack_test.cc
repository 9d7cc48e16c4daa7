// The KV cache entry packers: unpack(pack(x)) equals the reference's in-place fake-quant of x bit
// for bit, the byte layout is the documented one, and wrong sizes are rejected.

#include "kernels/cpu/kv_pack.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Other widths (the small test models: latent 128, index keys 64; also 32 and 96): the width comes
// from the value span, the entry sizes follow the formulas of kv_cache.h, the layout is the same
// (scales after the codes) and unpack(pack(x)) is the simulation bit for bit.
TEST(KvPack, GenericWidthsMatchSimulation) {
  static_assert(swa_entry_bytes(128) == 132 && comp_entry_bytes(128) == 72 &&
                index_key_bytes(64) == 34 && index_key_bytes(128) == kIndexKeyBytes);
  for (const int dim : {32, 64, 96, 128}) {
    SCOPED_TRACE(dim);
    const auto n = static_cast<size_t>(dim);
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      const auto x = random_values(n, 300 + seed + 17 * n);
      std::vector<float> got(n);

      std::vector<uint8_t> swa(static_cast<size_t>(swa_entry_bytes(dim)));
      pack_swa_entry(x, swa);
      unpack_swa_entry(swa, got);
      std::vector<float> want = x;
      act_quant_e4m3(std::span<float>(want), 32);
      EXPECT_TRUE(bitwise_equal(got, want)) << "swa seed " << seed;
      EXPECT_EQ(got[n - 1],
                e4m3_to_float(swa[n - 1]) * e8m0_to_float(swa[n + (n - 1) / 32]));  // last block

      std::vector<uint8_t> comp(static_cast<size_t>(comp_entry_bytes(dim)));
      pack_comp_entry(x, comp);
      unpack_comp_entry(comp, got);
      want = x;
      fp4_quant_e4m3(std::span<float>(want), 16);
      EXPECT_TRUE(bitwise_equal(got, want)) << "comp seed " << seed;
      EXPECT_EQ(got[17], e2m1_to_float(e2m1_hi(comp[8])) * e4m3_to_float(comp[n / 2 + 1]));

      std::vector<uint8_t> key(static_cast<size_t>(index_key_bytes(dim)));
      pack_index_key(x, key);
      unpack_index_key(key, got);
      want = x;
      fp4_quant_ue8m0(std::span<float>(want), 32);
      EXPECT_TRUE(bitwise_equal(got, want)) << "index key seed " << seed;
      EXPECT_EQ(got[n - 2],
                e2m1_to_float(e2m1_lo(key[n / 2 - 1])) * e8m0_to_float(key[n / 2 + (n - 2) / 32]));
    }
  }
  // The 512-wide SWA packer applied to the first 128 values of a 512-wide row gives the same
  // bytes as the 128-wide one on them: blocks are independent.
  const auto x = random_values(kKvDim, 77);
  std::vector<uint8_t> wide(kSwaEntryBytes), narrow(static_cast<size_t>(swa_entry_bytes(128)));
  pack_swa_entry(x, wide);
  pack_swa_entry(std::span<const float>(x.data(), 128), narrow);
  EXPECT_TRUE(std::equal(narrow.begin(), narrow.begin() + 128, wide.begin()));
  EXPECT_TRUE(std::equal(narrow.begin() + 128, narrow.end(), wide.begin() + kKvDim));
}

TEST(KvPack, GenericWidthsRejectBadSizes) {
  std::vector<float> x100(100), x120(120), x64(64);
  std::vector<uint8_t> e(600);
  EXPECT_THROW(pack_swa_entry(x100, std::span<uint8_t>(e.data(), 103)), Error);  // 100 % 32
  EXPECT_THROW(pack_comp_entry(x120, std::span<uint8_t>(e.data(), 67)), Error);  // 120 % 16
  EXPECT_THROW(pack_index_key(x64, std::span<uint8_t>(e.data(), kIndexKeyBytes)), Error);
  EXPECT_THROW(unpack_index_key(std::span<const uint8_t>(e.data(), 34), x100), Error);
  std::vector<float> none;
  EXPECT_THROW(pack_swa_entry(none, std::span<uint8_t>(e.data(), 0)), Error);
  EXPECT_NO_THROW(pack_index_key(x64, std::span<uint8_t>(e.data(), 34)));
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
