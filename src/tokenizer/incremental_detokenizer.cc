#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace di {

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_.append(tokenizer_->token_bytes(id));
  std::string out;
  const size_t stable = tokenizer::utf8_lossy_stable_prefix(pending_, out);
  pending_.erase(0, stable);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = tokenizer::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace di
