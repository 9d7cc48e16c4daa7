#include "engine/bundled_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

namespace fs = std::filesystem;

TEST(BundledTokenizer, EmbeddedFilesAreTheDataFiles) {
  const std::string v41 =
      testing::read_file(DI_SOURCE_DIR "/data/tokenizer/deepseek-v41/tokenizer.json");
  const std::string v4 =
      testing::read_file(DI_SOURCE_DIR "/data/tokenizer/deepseek-v4/tokenizer.json");
  EXPECT_EQ(bundled_tokenizer_json(ModelFamily::kDeepSeekV41), v41);
  EXPECT_EQ(bundled_tokenizer_json(ModelFamily::kDeepSeekV4), v4);
}

TEST(BundledTokenizer, ModelDirectoryTokenizerWins) {
  testing::TempDir dir;
  const ResolvedTokenizer bundled = resolve_tokenizer(dir.path(), ModelFamily::kDeepSeekV41);
  EXPECT_EQ(bundled.source, "bundled DeepSeek-V4.1 tokenizer");
  EXPECT_EQ(bundled.tokenizer.token_to_id("<｜System｜>"), 128799);
  const ResolvedTokenizer v4 = resolve_tokenizer(dir.path(), ModelFamily::kDeepSeekV4);
  EXPECT_EQ(v4.tokenizer.token_to_id("<｜System｜>"), std::nullopt);

  // A tokenizer.json in the model directory is used instead (here: the V4 file under a V4.1
  // model), and an explicit override beats both.
  fs::copy_file(DI_SOURCE_DIR "/data/tokenizer/deepseek-v4/tokenizer.json",
                dir.path() / "tokenizer.json");
  const ResolvedTokenizer own = resolve_tokenizer(dir.path(), ModelFamily::kDeepSeekV41);
  EXPECT_EQ(own.source, (dir.path() / "tokenizer.json").string());
  EXPECT_EQ(own.tokenizer.token_to_id("<｜System｜>"), std::nullopt);
  const ResolvedTokenizer forced =
      resolve_tokenizer(dir.path(), ModelFamily::kDeepSeekV4,
                        DI_SOURCE_DIR "/data/tokenizer/deepseek-v41/tokenizer.json");
  EXPECT_EQ(forced.tokenizer.token_to_id("<｜System｜>"), 128799);

  testing::write_file(dir.path() / "tokenizer.json", "{ not json");
  try {
    (void)resolve_tokenizer(dir.path(), ModelFamily::kDeepSeekV41);
    ADD_FAILURE() << "a malformed tokenizer.json was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace di
