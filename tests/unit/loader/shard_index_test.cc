#include "loader/shard_index.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "unit/loader/loader_test_util.h"

namespace di {
namespace {

using testing::contains;
using testing::error_of;
using testing::starts_with;

constexpr std::string_view kIndexLabel = "ckpt/model.safetensors.index.json";

std::string index_error(const std::string& text) {
  return error_of([&] { parse_shard_index(text, kIndexLabel); });
}

TEST(ParseShardIndex, ParsesWeightMapAndMetadata) {
  ShardIndex idx = parse_shard_index(R"({
    "metadata": {"total_size": 1234, "format": "pt"},
    "weight_map": {
      "b.weight": "model-00002-of-00002.safetensors",
      "a.weight": "model-00001-of-00002.safetensors",
      "c.weight": "model-00001-of-00002.safetensors"
    }})",
                                     kIndexLabel);
  EXPECT_EQ(idx.weight_map.size(), 3u);
  EXPECT_EQ(idx.weight_map.at("b.weight"), "model-00002-of-00002.safetensors");
  EXPECT_EQ(idx.shard_files, (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                       "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(idx.total_size, 1234u);
}

TEST(ParseShardIndex, TotalSizeAsStringOrAbsent) {
  EXPECT_EQ(
      parse_shard_index(
          R"({"metadata":{"total_size":"18446744073709551615"},"weight_map":{"a":"x.safetensors"}})",
          kIndexLabel)
          .total_size,
      18446744073709551615ull);
  EXPECT_FALSE(
      parse_shard_index(R"({"weight_map":{"a":"x.safetensors"}})", kIndexLabel).total_size);
  EXPECT_FALSE(
      parse_shard_index(R"({"metadata":{},"weight_map":{"a":"x.safetensors"}})", kIndexLabel)
          .total_size);
}

struct BadIndex {
  const char* what;
  std::string text;
  std::string expected;
};

class BadIndexTest : public ::testing::TestWithParam<BadIndex> {};

TEST_P(BadIndexTest, NamesFileAndField) {
  std::string msg = index_error(GetParam().text);
  EXPECT_TRUE(starts_with(msg, std::string(kIndexLabel) + ": ")) << GetParam().what;
  EXPECT_TRUE(contains(msg, GetParam().expected)) << GetParam().what;
}

INSTANTIATE_TEST_SUITE_P(
    ParseShardIndex, BadIndexTest,
    ::testing::Values(
        BadIndex{"malformed", R"({"weight_map": {)", "malformed JSON at byte"},
        BadIndex{"not object", R"(["a"])", "index must be a JSON object, got array"},
        BadIndex{"no weight map", R"({"metadata":{}})", "missing 'weight_map'"},
        BadIndex{"weight map array", R"({"weight_map":[]})",
                 "'weight_map' must be an object, got array"},
        BadIndex{"empty weight map", R"({"weight_map":{}})", "'weight_map' is empty"},
        BadIndex{"duplicate tensor",
                 R"({"weight_map":{"a":"x.safetensors","b":"x.safetensors","a":"y.safetensors"}})",
                 "tensor 'a' listed twice in weight_map"},
        BadIndex{"duplicate top key", R"({"weight_map":{"a":"x.safetensors"},"weight_map":{}})",
                 "key 'weight_map' listed twice at the top level"},
        BadIndex{"duplicate nested key",
                 R"({"metadata":{"format":"pt","format":"pt"},"weight_map":{"a":"x.safetensors"}})",
                 "key 'format' listed twice in object 'metadata'"},
        BadIndex{"file not string", R"({"weight_map":{"a":3}})",
                 "weight_map['a'] must be a shard file name string, got number"},
        BadIndex{"slash", R"({"weight_map":{"a":"sub/x.safetensors"}})",
                 "weight_map['a'] = 'sub/x.safetensors' is not a plain file name"},
        BadIndex{"dotdot", R"({"weight_map":{"a":"..x.safetensors"}})", "is not a plain file name"},
        BadIndex{"absolute", R"({"weight_map":{"a":"/etc/x.safetensors"}})",
                 "is not a plain file name"},
        BadIndex{"suffix", R"({"weight_map":{"a":"x.bin"}})",
                 "weight_map['a'] = 'x.bin' does not name a .safetensors file"},
        BadIndex{"bare suffix", R"({"weight_map":{"a":".safetensors"}})",
                 "does not name a .safetensors file"},
        BadIndex{"metadata array", R"({"metadata":[],"weight_map":{"a":"x.safetensors"}})",
                 "'metadata' must be an object"},
        BadIndex{"negative total",
                 R"({"metadata":{"total_size":-1},"weight_map":{"a":"x.safetensors"}})",
                 "metadata.total_size must be a non-negative integer, got -1"},
        BadIndex{"non-digit total",
                 R"({"metadata":{"total_size":"12a"},"weight_map":{"a":"x.safetensors"}})",
                 "metadata.total_size must be a non-negative integer"},
        BadIndex{
            "total overflow",
            R"({"metadata":{"total_size":"18446744073709551616"},"weight_map":{"a":"x.safetensors"}})",
            "metadata.total_size must be a non-negative integer"}),
    [](const ::testing::TestParamInfo<BadIndex>& param_info) {
      std::string name = param_info.param.what;
      for (char& c : name) {
        if (c == ' ' || c == '-') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace di
