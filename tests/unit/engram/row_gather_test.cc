// Engram row gather into the GPU staging layout: the staged codes and scales are the table's rows
// byte for byte in the order asked (repeats and any order allowed), they decode to
// cpu::decode_rows of those rows, and bad input (row id out of range, wrong staging size, a table
// of another format) is a di::Error naming it.

#include "engram/row_gather.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/fp8.h"
#include "engram_test_util.h"

namespace di {
namespace {

using testing::engram_error_of;
using testing::has_substr;

// A [rows, cols] FP8 table with random finite codes and UE8M0 scales in [120, 134].
struct Table {
  std::vector<uint8_t> codes, scales;
  cpu::WeightRef ref;
  Table(int64_t rows, int64_t cols, uint64_t seed) {
    std::mt19937_64 rng(seed);
    codes.resize(static_cast<size_t>(rows * cols));
    scales.resize(static_cast<size_t>(rows * cols / 32));
    for (auto& c : codes) {
      c = static_cast<uint8_t>(rng());
      if ((c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
    }
    for (auto& s : scales)
      s = static_cast<uint8_t>(120 + rng() % 15);
    ConstTensorView w{reinterpret_cast<const std::byte*>(codes.data()), DType::kF8E4M3,
                      Shape{rows, cols}};
    ConstTensorView s{reinterpret_cast<const std::byte*>(scales.data()), DType::kF8E8M0,
                      Shape{rows, cols / 32}};
    ref = cpu::fp8_block_weight(w, s, 1, 32, "engram.embed");
  }
};

TEST(EngramRowGather, StagesRowsInOrder) {
  const int64_t rows = 5000, cols = 256;
  const Table t(rows, cols, 1);
  const std::vector<int64_t> ids = {4999, 0, 17, 17, 2500, 3, 4999};
  std::vector<uint8_t> staging(engram_staging_bytes(t.ref, static_cast<int64_t>(ids.size())));
  ASSERT_EQ(staging.size(), ids.size() * (256 + 8));
  gather_engram_rows(t.ref, ids, staging);
  const size_t n = ids.size();
  for (size_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(ids[i]);
    EXPECT_EQ(std::memcmp(staging.data() + i * 256, t.codes.data() + r * 256, 256), 0) << i;
    EXPECT_EQ(std::memcmp(staging.data() + n * 256 + i * 8, t.scales.data() + r * 8, 8), 0) << i;
    // The staged row decodes to the table's row.
    std::vector<float> want(256);
    cpu::decode_rows<float>(t.ref, ids[i], ids[i] + 1, want.data());
    for (int c = 0; c < 256; ++c) {
      const float got = e4m3_to_float(staging[i * 256 + static_cast<size_t>(c)]) *
                        e8m0_to_float(staging[n * 256 + i * 8 + static_cast<size_t>(c / 32)]);
      ASSERT_EQ(got, want[static_cast<size_t>(c)]) << "entry " << i << " column " << c;
    }
  }
}

TEST(EngramRowGather, LargeGatherMatchesRowByRow) {
  // Enough rows for the parallel path; every row checked.
  const int64_t rows = 3000, cols = 64;
  const Table t(rows, cols, 2);
  std::mt19937_64 rng(3);
  std::vector<int64_t> ids(4096);
  for (auto& id : ids)
    id = static_cast<int64_t>(rng() % rows);
  std::vector<uint8_t> staging(engram_staging_bytes(t.ref, static_cast<int64_t>(ids.size())));
  gather_engram_rows(t.ref, ids, staging);
  const size_t n = ids.size();
  for (size_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(ids[i]);
    ASSERT_EQ(std::memcmp(staging.data() + i * 64, t.codes.data() + r * 64, 64), 0) << i;
    ASSERT_EQ(std::memcmp(staging.data() + n * 64 + i * 2, t.scales.data() + r * 2, 2), 0) << i;
  }
}

TEST(EngramRowGather, BadInputIsNamed) {
  const Table t(100, 256, 4);
  std::vector<uint8_t> staging(2 * (256 + 8));
  const std::vector<int64_t> bad = {5, 100};
  EXPECT_TRUE(has_substr(engram_error_of([&] { gather_engram_rows(t.ref, bad, staging); }),
                         "row id 100 (entry 1) outside the table of 100 rows"));
  const std::vector<int64_t> neg = {-1, 0};
  EXPECT_TRUE(has_substr(engram_error_of([&] { gather_engram_rows(t.ref, neg, staging); }),
                         "row id -1 (entry 0)"));
  const std::vector<int64_t> three = {1, 2, 3};
  EXPECT_TRUE(has_substr(engram_error_of([&] { gather_engram_rows(t.ref, three, staging); }),
                         "staging of 528 bytes for 3 rows, 792 needed"));
  cpu::WeightRef dense = t.ref;
  dense.format = cpu::WeightFormat::kDense;
  EXPECT_TRUE(has_substr(engram_error_of([&] { (void)engram_staging_bytes(dense, 1); }),
                         "must be FP8 with 1x32 UE8M0 scales"));
  // Nothing was written for the rejected calls.
  EXPECT_EQ(staging, std::vector<uint8_t>(2 * (256 + 8), 0));
}

}  // namespace
}  // namespace di
