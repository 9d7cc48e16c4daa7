#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace di::tokenizer {

// Byte-level BPE over token ids: a word is its bytes, each starting as the id of its one-byte
// token; merges are applied lowest rank first (leftmost among equal ranks, as HF does) through a
// priority queue over a linked list of symbols, so a word of n bytes costs O(n log n).
class BpeModel {
 public:
  // `vocab[id]` is the token spelling in the byte-level alphabet; `merges` are pairs of
  // spellings in rank order. `byte_token_ids[b]` is the id of the token for byte b.
  BpeModel(const std::vector<std::string>& vocab,
           const std::vector<std::pair<std::string, std::string>>& merges,
           const std::array<int32_t, 256>& byte_token_ids);

  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;

  std::array<int32_t, 256> byte_token_ids_;
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace di::tokenizer
