#pragma once

// The tokenizers shipped inside the binary (data/tokenizer/README.md), used when a model
// directory has no tokenizer.json of its own: synthetic checkpoints, fixtures, tests.

#include <filesystem>
#include <string>
#include <string_view>

#include "config/model_config.h"
#include "tokenizer/tokenizer.h"

namespace di {

// The bundled tokenizer.json text of a model family (V4.1 or V4).
std::string_view bundled_tokenizer_json(ModelFamily family);

struct ResolvedTokenizer {
  Tokenizer tokenizer;
  std::string source;  // the file path, or "bundled DeepSeek-V4.1 tokenizer"
  std::string json;    // the tokenizer.json bytes (for cache keys of derived data)
};

// `override_path` if given, else model_dir/tokenizer.json if present, else the bundled one of
// the model's family. Errors name the file.
ResolvedTokenizer resolve_tokenizer(const std::filesystem::path& model_dir, ModelFamily family,
                                    const std::filesystem::path& override_path = {});

}  // namespace di
