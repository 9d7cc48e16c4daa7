#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace di::tokenizer {

// GPT-2 style byte-level alphabet: every byte maps to one printable code point, so BPE vocab
// entries are strings over 256 "characters". Printable Latin-1 bytes map to themselves; the other
// 68 bytes map to U+0100.. in byte order.
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();

  // UTF-8 spelling of the character standing for `byte`.
  std::string_view char_of(uint8_t byte) const { return spellings_[byte]; }

  // The bytes a vocab token stands for, or nullopt when a character of `token` is outside the
  // alphabet (added tokens such as "<｜User｜>" then decode to their own UTF-8 bytes).
  std::optional<std::string> token_bytes(std::string_view token) const;

 private:
  std::array<std::string, 256> spellings_;
  std::array<int16_t, 0x144> byte_of_code_point_;  // -1 where the code point is not in the alphabet
};

}  // namespace di::tokenizer
