#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace di {

// Streaming decode: push() returns the text that became final with this token, never a broken
// UTF-8 sequence (an incomplete trailing sequence is held back until its bytes arrive or it turns
// out invalid). The concatenation of every push() and finish() equals
// Tokenizer::decode(all ids, skip_special). One instance per stream; the tokenizer must outlive it.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

  std::string push(int32_t id);
  // Flushes held bytes (an incomplete tail becomes U+FFFD) and resets for reuse.
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes not yet emitted: at most one incomplete UTF-8 sequence
};

}  // namespace di
