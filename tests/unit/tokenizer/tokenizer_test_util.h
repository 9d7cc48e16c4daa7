#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace di::testing {

inline const std::filesystem::path kTokenizerJson =
    DI_SHARED_DIR "/data/tokenizer-deepseek-v3/tokenizer.json";

// Loads the DeepSeek tokenizer once per test binary (loading takes about a second); nullptr when
// the shared data directory is absent, so callers can GTEST_SKIP.
inline const Tokenizer* deepseek_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    if (!std::filesystem::exists(kTokenizerJson)) return std::unique_ptr<Tokenizer>();
    return std::make_unique<Tokenizer>(Tokenizer::load(kTokenizerJson));
  }();
  return tokenizer.get();
}

#define DI_REQUIRE_TOKENIZER(var)                                                  \
  const ::di::Tokenizer* var = ::di::testing::deepseek_tokenizer();                \
  if (var == nullptr) GTEST_SKIP() << "missing " << ::di::testing::kTokenizerJson; \
  do {                                                                             \
  } while (0)

}  // namespace di::testing
