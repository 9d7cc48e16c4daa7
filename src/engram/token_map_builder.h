#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "engram/token_map.h"
#include "tokenizer/tokenizer.h"

namespace di {

// The normaliser N of delta spec §2.2, exactly as HF `tokenizers` runs the reference's
// Sequence[NFKC, NFD, StripAccents, Lowercase, Replace("[ \t\r\n]+", " "), Replace("^ $", U+E000),
// Strip, Replace(U+E000, " ")] on valid UTF-8 `text`. HF takes NFKC/NFD and the combining-mark test
// from Unicode 9.0 tables and Lowercase/Strip from Rust's std; token_map_unicode_delta.inc holds
// where ICU differs (see tests/engram_tools/make_engram_unicode_delta.py).
std::string engram_normalize(std::string_view text);

// The key raw id `id` is grouped by: the raw token spelling when its one-token decode contains
// U+FFFD (a partial UTF-8 byte token), else N(decode) or, when that is empty, the decode itself.
std::string compressed_token_key(const Tokenizer& tok, int32_t id);

// Compressed id of every raw id 0..vocab_size-1: the first-appearance rank of its key (delta spec
// §2.2, reference `build_compressed_token_map`). `source` names the map in error messages.
// Single-threaded; about 0.2 s for the 129k V4.1 vocabulary (plus loading the tokenizer).
CompressedTokenMap build_compressed_token_map(const Tokenizer& tok, std::string source);

// Writes `map` as tensor `token_map` I64 [vocab] (what CompressedTokenMap::load_file reads), to a
// temporary file next to `file` that is then renamed over it, so readers never see a partial file.
void write_token_map_file(const CompressedTokenMap& map, const std::filesystem::path& file);

// Name of the cached map of a tokenizer: engram_token_map-<FNV-1a-64 of the tokenizer.json
// bytes, 16 hex digits>.safetensors.
std::string token_map_cache_name(std::string_view tokenizer_json_bytes);

// The map the engine uses, in order of preference:
//   1. model_dir/engram_token_map.safetensors when present (shipped with the checkpoint);
//   2. cache_dir/token_map_cache_name(tokenizer.json) when present and of expected_classes classes;
//   3. built from tokenizer_json; a class count other than expected_classes throws di::Error naming
//      the tokenizer file and both counts. The result is then written to the cache (skipped when
//      cache_dir is empty; a write failure is logged as a warning).
CompressedTokenMap load_or_build_token_map(const std::filesystem::path& model_dir,
                                           const std::filesystem::path& tokenizer_json,
                                           int64_t expected_classes,
                                           const std::filesystem::path& cache_dir);

}  // namespace di
