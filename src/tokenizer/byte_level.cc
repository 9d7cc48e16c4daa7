#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace di::tokenizer {
namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool maps_to_itself(uint32_t byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
}

}  // namespace

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_code_point_.fill(-1);
  uint32_t next_extra = 0x100;
  for (uint32_t byte = 0; byte < 256; ++byte) {
    const uint32_t cp = maps_to_itself(byte) ? byte : next_extra++;
    append_utf8(spellings_[byte], cp);
    byte_of_code_point_[cp] = static_cast<int16_t>(byte);
  }
}

std::optional<std::string> ByteLevelAlphabet::token_bytes(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const Utf8Step step = utf8_step(token, pos);
    if (step.kind != Utf8Step::Kind::kValid || step.length > 2) return std::nullopt;
    uint32_t cp = static_cast<uint8_t>(token[pos]);
    if (step.length == 2) {
      cp = ((cp & 0x1F) << 6) | (static_cast<uint8_t>(token[pos + 1]) & 0x3F);
    }
    if (cp >= byte_of_code_point_.size() || byte_of_code_point_[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte_of_code_point_[cp]));
    pos += step.length;
  }
  return out;
}

}  // namespace di::tokenizer
