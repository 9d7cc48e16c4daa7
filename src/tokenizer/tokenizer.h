#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"

namespace di {

// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json of the DeepSeek shape (empty
// normaliser, Sequence of isolating Split regexes + ByteLevel, BPE without unk/byte fallback,
// ByteLevel decoder). Ids match HF `tokenizers` exactly. Immutable after load: every const method
// may be called from many threads at once.
class Tokenizer {
 public:
  static Tokenizer load(const std::filesystem::path& tokenizer_json);
  // `label` names the source in error messages.
  static Tokenizer from_json(std::string_view json_text, std::string_view label);

  // Encodes `text`. Invalid UTF-8 is first replaced with U+FFFD (maximal-subpart policy); NUL
  // bytes are ordinary characters. With `parse_special_tokens`, special added-token spellings in
  // the text become their ids (HF default); without, they are encoded as plain text (HF
  // `encode_special_tokens=True`), so user text cannot inject control tokens. Non-special added
  // tokens are always matched. No BOS is added (DeepSeek V4: add_bos_token=false).
  std::vector<int32_t> encode(std::string_view text, bool parse_special_tokens = true) const;

  // Concatenates the bytes of the tokens and replaces invalid UTF-8 with U+FFFD, as HF decode
  // does. Ids outside the vocabulary are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token spelling (byte-level alphabet for BPE tokens); empty for an unknown id.
  std::string_view id_to_token(int32_t id) const;
  // One past the largest id (base vocab plus added tokens).
  size_t vocab_size() const { return tokens_.size(); }
  bool is_special(int32_t id) const;

  // The raw bytes one token contributes to a decode (what the ByteLevel decoder maps it to).
  std::string_view token_bytes(int32_t id) const;

 private:
  Tokenizer() = default;

  struct TokenInfo {
    std::string spelling;
    std::string bytes;  // decoded bytes
    bool special = false;
    bool exists = false;
  };

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<TokenInfo> tokens_;
  std::unordered_map<std::string, int32_t> id_of_;
  std::unique_ptr<tokenizer::AddedVocabulary> added_;
  std::unique_ptr<tokenizer::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tokenizer::BpeModel> bpe_;
};

}  // namespace di
