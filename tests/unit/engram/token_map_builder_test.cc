#include "engram/token_map_builder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests_support/temp_dir.h"
#include "unit/engram/engram_test_util.h"

namespace di {
namespace {

using testing::engram_error_of;
using testing::has_substr;

constexpr int64_t kV41Classes = 99092;  // delta spec §2.2, HF tokenizers 0.23.3
constexpr int64_t kV3Classes = 98627;   // HF tokenizers 0.23.3

std::filesystem::path v41_tokenizer() {
  return std::filesystem::path(DI_SOURCE_DIR) / "data/tokenizer/deepseek-v41/tokenizer.json";
}

std::filesystem::path v4_tokenizer() {
  return std::filesystem::path(DI_SOURCE_DIR) / "data/tokenizer/deepseek-v4/tokenizer.json";
}

std::filesystem::path v3_tokenizer() {
  return std::filesystem::path(DI_SHARED_DIR) / "data/tokenizer-deepseek-v3/tokenizer.json";
}

// The V4.1 map from HF tokenizers (tests/engram_tools/make_engram_map_golden.py).
std::vector<uint32_t> read_golden() {
  const std::string bytes = testing::read_file(std::filesystem::path(DI_SOURCE_DIR) /
                                               "tests/data/engram/engram_map_v41.u32");
  std::vector<uint32_t> golden(bytes.size() / sizeof(uint32_t));
  std::memcpy(golden.data(), bytes.data(), golden.size() * sizeof(uint32_t));
  return golden;
}

// Built once: every test that needs the real V4.1 map shares it.
const Tokenizer& v41() {
  static const Tokenizer tok = Tokenizer::load(v41_tokenizer());
  return tok;
}

std::string u8(const char8_t* s) {
  return std::string(reinterpret_cast<const char*>(s));
}

TEST(EngramNormalize, FoldsCaseSpaceAndAccents) {
  EXPECT_EQ(engram_normalize(" The"), "the");
  EXPECT_EQ(engram_normalize("THE\t\n"), "the");
  EXPECT_EQ(engram_normalize(u8(u8"Caf\u00e9")), "cafe");
  EXPECT_EQ(engram_normalize(u8(u8"\ufb01")), "fi");           // NFKC ligature
  EXPECT_EQ(engram_normalize("a \t\r\n b"), "a b");            // one run, one space
  EXPECT_EQ(engram_normalize(u8(u8"a\u00a0\u00a0b")), "a b");  // NFKC: NBSP -> ' ', then one run
  EXPECT_EQ(engram_normalize("a \v b"), "a \v b");             // VT is not in the run class
  EXPECT_EQ(engram_normalize("\v \v"), "");                    // but Strip removes it
}

TEST(EngramNormalize, KeepsALoneSpace) {
  EXPECT_EQ(engram_normalize(" "), " ");
  EXPECT_EQ(engram_normalize("\n\n"), " ");
  EXPECT_EQ(engram_normalize(u8(u8"\u3000")), " ");  // NFKC -> ' ' -> sentinel
  EXPECT_EQ(engram_normalize(u8(u8"\u2028")), "");   // White_Space, not in [ \t\r\n]
  EXPECT_EQ(engram_normalize(u8(u8"\ue000")), " ");  // the sentinel itself turns into a space
  EXPECT_EQ(engram_normalize("  x  "), "x");
}

TEST(EngramNormalize, LowercasesPerCodePointLikeRust) {
  // U+0130 is decomposed (I + U+0307) and its dot stripped before Lowercase sees it.
  EXPECT_EQ(engram_normalize(u8(u8"\u0130")), "i");
  EXPECT_EQ(engram_normalize(u8(u8"\u039f\u03a3")), u8(u8"\u03bf\u03c3"));  // no final sigma
  EXPECT_EQ(engram_normalize(u8(u8"\ua7cb")), u8(u8"\u0264"));  // Unicode 16, beyond ICU 72
}

TEST(EngramNormalize, UsesHfUnicode9NormalisationTables) {
  // U+32FF (Unicode 12.1) has a compatibility decomposition HF's tables do not know.
  EXPECT_EQ(engram_normalize(u8(u8"\u32ff")), u8(u8"\u32ff"));
  // U+11938 (Unicode 13) decomposes canonically in ICU, not in HF.
  EXPECT_EQ(engram_normalize(u8(u8"\U00011938")), u8(u8"\U00011938"));
  // U+0898 (Unicode 14) is a mark in ICU but unassigned for HF's StripAccents.
  EXPECT_EQ(engram_normalize(u8(u8"a\u0898")), u8(u8"a\u0898"));
  // Newer code points split the text: the parts around them are normalised on their own...
  EXPECT_EQ(engram_normalize(u8(u8"E\u0301\u32ffA")), u8(u8"e\u32ffa"));
  // ...and are never reordered (ICU would swap these Unicode 10 marks of class 232 and 228).
  EXPECT_EQ(engram_normalize(u8(u8"a\u1df6\u1df8")), u8(u8"a\u1df6\u1df8"));
  // General category changes since Unicode 9.0.
  EXPECT_EQ(engram_normalize(u8(u8"a\u1cf2")), "a");                    // was Mc
  EXPECT_EQ(engram_normalize(u8(u8"\U000111c9")), u8(u8"\U000111c9"));  // was Po
}

TEST(EngramTokenMapBuilder, MatchesHfGoldenForV41) {
  const std::vector<uint32_t> golden = read_golden();
  const CompressedTokenMap map = build_compressed_token_map(v41(), "v41");
  ASSERT_EQ(golden.size(), 129280u);
  ASSERT_EQ(map.vocab_size(), 129280);
  EXPECT_EQ(map.compressed_vocab_size(), kV41Classes);
  EXPECT_EQ(map.lookup(2), 2);  // engram_pad_id
  int mismatches = 0;
  for (size_t raw = 0; raw < golden.size(); ++raw) {
    if (static_cast<uint32_t>(map.table()[raw]) == golden[raw]) continue;
    const auto id = static_cast<int32_t>(raw);
    if (++mismatches <= 10) {
      ADD_FAILURE() << "id " << id << " token '" << v41().id_to_token(id) << "' key '"
                    << compressed_token_key(v41(), id) << "': got " << map.table()[raw] << ", HF "
                    << golden[raw];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(EngramTokenMapBuilder, V4TokenizerHasTheSameClassCount) {
  const CompressedTokenMap map = build_compressed_token_map(Tokenizer::load(v4_tokenizer()), "v4");
  EXPECT_EQ(map.compressed_vocab_size(), kV41Classes);
  EXPECT_EQ(map.lookup(2), 2);
}

TEST(EngramTokenMapBuilder, V3TokenizerClassCount) {
  if (!std::filesystem::exists(v3_tokenizer())) GTEST_SKIP() << "shared V3 tokenizer absent";
  const CompressedTokenMap map = build_compressed_token_map(Tokenizer::load(v3_tokenizer()), "v3");
  EXPECT_EQ(map.vocab_size(), 128815);
  EXPECT_EQ(map.compressed_vocab_size(), kV3Classes);
}

TEST(EngramTokenMapBuilder, KeysPartialByteTokensByTheirSpelling) {
  // A lone continuation byte decodes to U+FFFD, so its raw spelling is the key.
  const std::optional<int32_t> id = v41().token_to_id(u8(u8"\u00a4"));  // byte 0xA4
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(compressed_token_key(v41(), *id), u8(u8"\u00a4"));
}

TEST(EngramTokenMapBuilder, CachesTheBuiltMap) {
  testing::TempDir tmp("engram-map");
  const std::filesystem::path cache = tmp / "cache";
  const std::string name = token_map_cache_name(testing::read_file(v41_tokenizer()));
  // A corrupt cache entry is ignored (with a warning) and replaced.
  testing::write_file(cache / name, "not a safetensors file");

  const CompressedTokenMap built =
      load_or_build_token_map(tmp / "model", v41_tokenizer(), kV41Classes, cache);
  EXPECT_EQ(built.compressed_vocab_size(), kV41Classes);
  ASSERT_TRUE(std::filesystem::exists(cache / name));
  for (const auto& entry : std::filesystem::directory_iterator(cache)) {
    EXPECT_EQ(entry.path().filename(), name) << "temporary file left behind";
  }

  const CompressedTokenMap cached =
      load_or_build_token_map(tmp / "model", v41_tokenizer(), kV41Classes, cache);
  EXPECT_TRUE(has_substr(cached.source(), name)) << "second call did not read the cache";
  ASSERT_EQ(cached.vocab_size(), built.vocab_size());
  EXPECT_TRUE(std::equal(cached.table().begin(), cached.table().end(), built.table().begin()));
  EXPECT_EQ(cached.compressed_vocab_size(), kV41Classes);
}

TEST(EngramTokenMapBuilder, ModelDirMapWins) {
  testing::TempDir tmp("engram-map");
  std::filesystem::create_directories(tmp / "model");
  const CompressedTokenMap shipped(std::vector<int32_t>{0, 1, 1, 2}, 3, "toy");
  write_token_map_file(shipped, tmp / "model" / kEngramTokenMapFile);
  const CompressedTokenMap map =
      load_or_build_token_map(tmp / "model", v41_tokenizer(), 3, tmp / "cache");
  EXPECT_EQ(map.vocab_size(), 4);
  EXPECT_EQ(map.lookup(2), 1);
  EXPECT_FALSE(std::filesystem::exists(tmp / "cache"));
}

TEST(EngramTokenMapBuilder, WrongClassCountNamesFileAndCounts) {
  testing::TempDir tmp("engram-map");
  const std::string msg = engram_error_of(
      [&] { load_or_build_token_map(tmp / "model", v41_tokenizer(), 99091, tmp / "cache"); });
  EXPECT_TRUE(has_substr(msg, v41_tokenizer().string()));
  EXPECT_TRUE(has_substr(msg, "99092"));
  EXPECT_TRUE(has_substr(msg, "99091"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "cache"));
}

TEST(EngramTokenMapBuilder, MissingTokenizerIsAnError) {
  testing::TempDir tmp("engram-map");
  const std::string msg = engram_error_of(
      [&] { load_or_build_token_map(tmp / "model", tmp / "nope.json", 3, tmp / "cache"); });
  EXPECT_TRUE(has_substr(msg, "nope.json"));
}

}  // namespace
}  // namespace di
