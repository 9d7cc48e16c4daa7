#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace di::tokenizer {

// How a byte sequence starting at some position reads as UTF-8.
struct Utf8Step {
  enum class Kind {
    kValid,       // `length` bytes form one valid scalar value
    kInvalid,     // `length` bytes are a maximal invalid subpart: one U+FFFD replaces them
    kIncomplete,  // the input ends inside an otherwise valid sequence of `length` bytes
  };
  Kind kind;
  size_t length;
};

// Classifies the sequence at `pos` (< text.size()) following the Unicode "maximal subpart"
// substitution policy, which is also what Rust's String::from_utf8_lossy (and so Hugging Face
// tokenizers' decode) does.
Utf8Step utf8_step(std::string_view text, size_t pos);

bool utf8_valid(std::string_view bytes);

// Replaces every maximal invalid subpart (and an incomplete tail) with U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Appends to `out` the lossy decoding of the longest prefix of `bytes` whose decoding can no
// longer change when more bytes follow; returns that prefix length. An incomplete trailing
// sequence is left for the caller to keep.
size_t utf8_lossy_stable_prefix(std::string_view bytes, std::string& out);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace di::tokenizer
