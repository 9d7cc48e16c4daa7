#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
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

  // Open-addressing hash table of the merges (linear probing, power-of-two size, load <= 1/2):
  // one cache line per lookup instead of a node chase; the lookup is the hot path of encode.
  struct Slot {
    uint64_t key;  // pair_key, kEmpty when unused
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  std::array<int32_t, 256> byte_token_ids_;
  std::vector<Slot> slots_;
  int shift_ = 64;
};

}  // namespace di::tokenizer
