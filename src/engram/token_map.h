#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace di {

// File and tensor names of the shipped compressed token map (fixtures README §3.4).
inline constexpr const char* kEngramTokenMapFile = "engram_token_map.safetensors";
inline constexpr const char* kEngramTokenMapTensor = "token_map";

// Raw tokenizer id -> compressed id (delta spec §2.2): tokens that normalise alike share one id,
// so n-grams are hashed over the compressed ids. The table is data computed offline from the
// tokenizer; the engine loads it rather than re-deriving it.
class CompressedTokenMap {
 public:
  // `compressed_ids[raw]` for every raw id; each must lie in [0, compressed_vocab_size).
  // `source` names the origin in error messages.
  CompressedTokenMap(std::vector<int32_t> compressed_ids, int64_t compressed_vocab_size,
                     std::string source);

  // Reads tensor `token_map` (I64 [vocab]) from `file`. Throws di::Error naming the file and
  // tensor on a missing tensor, wrong dtype or rank, or an id outside [0, compressed_vocab_size).
  static CompressedTokenMap load_file(const std::filesystem::path& file,
                                      int64_t compressed_vocab_size);
  // load_file(model_dir / engram_token_map.safetensors).
  static CompressedTokenMap load(const std::filesystem::path& model_dir,
                                 int64_t compressed_vocab_size);

  // Throws di::Error naming the id when raw_id is outside [0, vocab_size()).
  int64_t lookup(int64_t raw_id) const;

  int64_t vocab_size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t compressed_vocab_size() const { return compressed_vocab_size_; }
  // Stored as int32: ids are far below 2^31 and the hot path is a random gather.
  std::span<const int32_t> table() const { return ids_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<int32_t> ids_;
  int64_t compressed_vocab_size_ = 0;
  std::string source_;
};

}  // namespace di
