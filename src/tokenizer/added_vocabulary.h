#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di::tokenizer {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;     // skipped by decode(skip_special_tokens) and by encode without special parsing
  bool normalized;  // matched after normalisation (the DeepSeek normaliser is empty)
};

// A piece of input after added-token extraction: either an added token id or a text span.
struct Segment {
  int32_t added_id;  // -1 for text
  size_t begin;
  size_t end;
};

// Finds added tokens in text like HF's AddedVocabulary: first the non-normalised tokens, then in
// the remaining text the normalised ones, each pass leftmost-longest over a byte trie.
class AddedVocabulary {
 public:
  explicit AddedVocabulary(const std::vector<AddedToken>& tokens);

  // `include_special`: false leaves special tokens as plain text (HF encode_special_tokens).
  std::vector<Segment> split(std::string_view text, bool include_special) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // index into tokens_ when a token ends here
  };
  class Trie {
   public:
    void insert(std::string_view key, int32_t token);
    // Longest token starting at `pos`, as (token index, length); token index -1 when none.
    std::pair<int32_t, size_t> longest(std::string_view text, size_t pos,
                                       const std::vector<AddedToken>& tokens,
                                       bool include_special) const;

   private:
    std::vector<Node> nodes_{Node{}};
  };

  void split_pass(const Trie& trie, std::string_view text, bool include_special,
                  std::vector<Segment>& segments) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace di::tokenizer
