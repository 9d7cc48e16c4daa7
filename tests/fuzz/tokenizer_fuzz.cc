// libFuzzer target for the tokenizer (issue #4): arbitrary bytes (invalid UTF-8, NULs, special
// token spellings) are encoded with and without special-token parsing, decoded, and streamed
// through the incremental detokenizer; arbitrary id sequences are decoded. Properties checked:
// no crash or sanitizer report, every id in range, decode output is valid UTF-8, streaming equals
// the full decode, and encode(decode(encode(x))) == encode(x) when x is valid UTF-8 without
// special tokens.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

const di::Tokenizer& tokenizer() {
  static const std::unique_ptr<di::Tokenizer> tok = [] {
    const char* env = std::getenv("DI_TOKENIZER_JSON");
    const std::string path = env != nullptr ? env : DI_TOKENIZER_DEFAULT;
    return std::make_unique<di::Tokenizer>(di::Tokenizer::load(path));
  }();
  return *tok;
}

bool valid_utf8(std::string_view s) {
  return di::tokenizer::utf8_valid(s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const di::Tokenizer& tok = tokenizer();
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode & 1) {
    // Bytes as an id sequence (some out of range: decode skips unknown ids, as HF does).
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 4 <= text.size(); i += 4) {
      uint32_t v = static_cast<uint8_t>(text[i]) | static_cast<uint8_t>(text[i + 1]) << 8 |
                   static_cast<uint8_t>(text[i + 2]) << 16 |
                   static_cast<uint32_t>(static_cast<uint8_t>(text[i + 3])) << 24;
      ids.push_back(static_cast<int32_t>(v % (tok.vocab_size() + 16)));
    }
    const bool skip = (mode & 2) != 0;
    const std::string full = tok.decode(ids, skip);
    require(valid_utf8(full));
    di::IncrementalDetokenizer detok(tok, skip);
    std::string streamed;
    for (int32_t id : ids)
      streamed += detok.push(id);
    streamed += detok.finish();
    require(streamed == full);
    return 0;
  }
  const bool parse_special = (mode & 2) != 0;
  const std::vector<int32_t> ids = tok.encode(text, parse_special);
  for (int32_t id : ids)
    require(id >= 0 && static_cast<size_t>(id) < tok.vocab_size());
  const std::string back = tok.decode(ids, false);
  require(valid_utf8(back));
  if (!parse_special && valid_utf8(text)) {
    // Without special-token parsing, byte-level BPE is lossless on valid UTF-8.
    require(back == text);
    require(tok.encode(back, false) == ids);
  }
  return 0;
}
