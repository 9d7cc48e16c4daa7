#include "tokenizer/utf8.h"

#include <cstdint>

namespace di::tokenizer {
namespace {

bool in_range(uint8_t b, uint8_t lo, uint8_t hi) {
  return b >= lo && b <= hi;
}

}  // namespace

Utf8Step utf8_step(std::string_view text, size_t pos) {
  const auto byte_at = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte_at(pos);
  if (lead < 0x80) return {Utf8Step::Kind::kValid, 1};
  size_t need = 0;
  uint8_t second_lo = 0x80;
  uint8_t second_hi = 0xBF;
  if (in_range(lead, 0xC2, 0xDF)) {
    need = 1;
  } else if (in_range(lead, 0xE0, 0xEF)) {
    need = 2;
    if (lead == 0xE0) second_lo = 0xA0;
    if (lead == 0xED) second_hi = 0x9F;  // no UTF-16 surrogates
  } else if (in_range(lead, 0xF0, 0xF4)) {
    need = 3;
    if (lead == 0xF0) second_lo = 0x90;
    if (lead == 0xF4) second_hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Step::Kind::kInvalid, 1};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (pos + k >= text.size()) return {Utf8Step::Kind::kIncomplete, k};
    const uint8_t b = byte_at(pos + k);
    const bool ok = k == 1 ? in_range(b, second_lo, second_hi) : in_range(b, 0x80, 0xBF);
    if (!ok) return {Utf8Step::Kind::kInvalid, k};
  }
  return {Utf8Step::Kind::kValid, need + 1};
}

size_t utf8_lossy_stable_prefix(std::string_view bytes, std::string& out) {
  size_t pos = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes, copied in one go
  while (pos < bytes.size()) {
    const Utf8Step step = utf8_step(bytes, pos);
    if (step.kind == Utf8Step::Kind::kValid) {
      pos += step.length;
      continue;
    }
    out.append(bytes.substr(run_start, pos - run_start));
    if (step.kind == Utf8Step::Kind::kIncomplete) return pos;
    out.append(kReplacementChar);
    pos += step.length;
    run_start = pos;
  }
  out.append(bytes.substr(run_start, pos - run_start));
  return pos;
}

bool utf8_valid(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = utf8_step(bytes, pos);
    if (step.kind != Utf8Step::Kind::kValid) return false;
    pos += step.length;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const size_t stable = utf8_lossy_stable_prefix(bytes, out);
  if (stable < bytes.size()) out.append(kReplacementChar);  // an incomplete tail is one subpart
  return out;
}

}  // namespace di::tokenizer
