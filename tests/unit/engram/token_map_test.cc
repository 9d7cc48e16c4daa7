#include "engram/token_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "loader/safetensors_writer.h"
#include "tests_support/temp_dir.h"
#include "unit/engram/engram_test_util.h"

namespace di {
namespace {

using testing::engram_error_of;
using testing::engram_fixture_dir;
using testing::engram_fixture_present;
using testing::has_substr;

// Writes one tensor named `name` with the given dtype/shape and raw payload.
void write_tensor(const std::string& path, const std::string& name, DType dtype, Shape shape,
                  const std::vector<std::byte>& payload) {
  SafetensorsWriter w(path, {{name, dtype, std::move(shape)}});
  w.write(payload);
  w.finish();
}

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(CompressedTokenMap, LoadsFixtureMap) {
  if (!engram_fixture_present()) GTEST_SKIP() << "fixture not present";
  CompressedTokenMap map = CompressedTokenMap::load(engram_fixture_dir(), 1081);
  EXPECT_EQ(map.vocab_size(), 1280);
  EXPECT_EQ(map.compressed_vocab_size(), 1081);
  // Fixtures README §3.4: key(t) = 5 if t >= 100 and t % 53 == 0; t - 1 if t >= 10 and
  // t % 7 == 3; else t. Compressed ids are first-appearance ranks of the keys.
  EXPECT_EQ(map.lookup(2), 2);  // pad
  EXPECT_EQ(map.lookup(9), 9);
  EXPECT_EQ(map.lookup(10), 9);  // 10 % 7 == 3 -> key 9
  EXPECT_EQ(map.lookup(11), 10);
  EXPECT_EQ(map.lookup(106), 5);  // 106 = 2 * 53 -> key 5
  int64_t max_id = 0;
  for (int32_t c : map.table())
    max_id = std::max<int64_t>(max_id, c);
  EXPECT_EQ(max_id, 1080);
}

TEST(CompressedTokenMap, LookupRejectsOutOfRangeRawIds) {
  CompressedTokenMap map(std::vector<int32_t>{0, 1, 1, 2}, 3, "toy-map");
  EXPECT_EQ(map.lookup(2), 1);
  std::string msg = engram_error_of([&] { map.lookup(4); });
  EXPECT_TRUE(has_substr(msg, "token id 4"));
  EXPECT_TRUE(has_substr(msg, "toy-map"));
  EXPECT_TRUE(has_substr(engram_error_of([&] { map.lookup(-1); }), "token id -1"));
}

TEST(CompressedTokenMap, ReadsUnalignedTensorData) {
  // safetensors offsets need not be multiples of 8: a 3-byte tensor first misaligns the map.
  testing::TempDir dir;
  const std::string path = (dir / kEngramTokenMapFile).string();
  SafetensorsWriter w(path, {{"a", DType::kU8, Shape{3}}, {"token_map", DType::kI64, Shape{3}}});
  w.write(std::vector<std::byte>(3));
  w.write(bytes_of(std::vector<int64_t>{2, 0, 1}));
  w.finish();
  CompressedTokenMap map = CompressedTokenMap::load(dir.path(), 3);
  EXPECT_EQ(map.lookup(0), 2);
  EXPECT_EQ(map.lookup(2), 1);
}

TEST(CompressedTokenMap, RejectsWrongDtype) {
  testing::TempDir dir;
  const std::string path = (dir / kEngramTokenMapFile).string();
  write_tensor(path, "token_map", DType::kI32, Shape{4},
               bytes_of(std::vector<int32_t>{0, 1, 2, 3}));
  std::string msg = engram_error_of([&] { CompressedTokenMap::load(dir.path(), 4); });
  EXPECT_TRUE(has_substr(msg, path));
  EXPECT_TRUE(has_substr(msg, "'token_map'"));
  EXPECT_TRUE(has_substr(msg, "I32"));
}

TEST(CompressedTokenMap, RejectsWrongRank) {
  testing::TempDir dir;
  const std::string path = (dir / kEngramTokenMapFile).string();
  write_tensor(path, "token_map", DType::kI64, Shape{2, 2},
               bytes_of(std::vector<int64_t>{0, 1, 2, 3}));
  std::string msg = engram_error_of([&] { CompressedTokenMap::load(dir.path(), 4); });
  EXPECT_TRUE(has_substr(msg, path));
  EXPECT_TRUE(has_substr(msg, "[2, 2]"));
}

TEST(CompressedTokenMap, RejectsIdsOutsideCompressedVocab) {
  testing::TempDir dir;
  const std::string path = (dir / kEngramTokenMapFile).string();
  write_tensor(path, "token_map", DType::kI64, Shape{4},
               bytes_of(std::vector<int64_t>{0, 1, 4, 3}));
  std::string msg = engram_error_of([&] { CompressedTokenMap::load(dir.path(), 4); });
  EXPECT_TRUE(has_substr(msg, path));
  EXPECT_TRUE(has_substr(msg, "entry 2 = 4"));
  write_tensor(path, "token_map", DType::kI64, Shape{2}, bytes_of(std::vector<int64_t>{0, -1}));
  EXPECT_TRUE(has_substr(engram_error_of([&] { CompressedTokenMap::load(dir.path(), 4); }),
                         "entry 1 = -1"));
}

TEST(CompressedTokenMap, RejectsMissingTensorAndFile) {
  testing::TempDir dir;
  const std::string path = (dir / kEngramTokenMapFile).string();
  write_tensor(path, "other", DType::kI64, Shape{1}, bytes_of(std::vector<int64_t>{0}));
  std::string msg = engram_error_of([&] { CompressedTokenMap::load(dir.path(), 4); });
  EXPECT_TRUE(has_substr(msg, path));
  EXPECT_TRUE(has_substr(msg, "'token_map' not found"));
  testing::TempDir empty;
  EXPECT_TRUE(has_substr(engram_error_of([&] { CompressedTokenMap::load(empty.path(), 4); }),
                         kEngramTokenMapFile));
}

}  // namespace
}  // namespace di
