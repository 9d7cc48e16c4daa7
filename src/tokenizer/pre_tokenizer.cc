#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/check.h"

namespace di::tokenizer {
namespace {

#include "tokenizer/unicode_delta.inc"

// Class members to add after \p{X} so PCRE2 agrees with HF's newer Unicode tables.
std::string_view newer_members(std::string_view property) {
  if (property == "L") return kNewLetterOrMark;
  if (property == "N") return kNewNumber;
  if (property == "P") return kNewPunctOrSymbol;
  return {};
}

// Unicode White_Space, the set Oniguruma's \s stands for.
constexpr std::string_view kWhiteSpaceRanges =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// A small PCRE2 JIT stack per thread: the default 32 KiB machine-stack area is enough for these
// patterns on short pieces, but a single multi-megabyte piece needs more room.
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 8 * 1024 * 1024;
constexpr uint32_t kOvectorPairs = 16;

}  // namespace

struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  MatchState() {
    // Room for the whole match plus captures; only the whole match (pair 0) is read, and rc == 0
    // (more captures than pairs) still sets it.
    data = pcre2_match_data_create(kOvectorPairs, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
    DI_CHECK(data != nullptr && context != nullptr && jit_stack != nullptr,
             "PCRE2 match state allocation failed");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    // The default limit (10M backtracking steps) trips on one multi-megabyte whitespace run,
    // where `\s*[\r\n]+` backtracks once per byte; every pattern here is linear per attempt.
    pcre2_set_match_limit(context, UINT32_MAX);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

struct RegexSplit::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::string rewrite_for_pcre2(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      const size_t close = pattern.find('}', i);
      if (next == 'p' && i + 1 < pattern.size() && pattern[i + 1] == '{' &&
          close != std::string_view::npos) {
        const std::string_view escape = pattern.substr(i - 1, close - i + 2);  // \p{X}
        const std::string_view extra = newer_members(pattern.substr(i + 2, close - i - 2));
        i = close;
        if (extra.empty()) {
          out.append(escape);
        } else if (in_class) {
          out.append(escape).append(extra);
        } else {
          out.append("[").append(escape).append(extra).append("]");
        }
        continue;
      }
      if (next == 's' || next == 'S') {
        DI_CHECK(!(in_class && next == 'S'), "\\S inside a character class is not supported");
        if (in_class) {
          out.append(kWhiteSpaceRanges);
        } else {
          out.append(next == 's' ? "[" : "[^").append(kWhiteSpaceRanges).append("]");
        }
      } else {
        out.push_back(c);
        out.push_back(next);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

RegexSplit::RegexSplit(std::string_view hf_pattern) : compiled_(std::make_unique<Compiled>()) {
  const std::string pattern = rewrite_for_pcre2(hf_pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    DI_FAIL("pre-tokenizer regex '{}' does not compile at offset {}: {}", hf_pattern, error_offset,
            reinterpret_cast<const char*>(message));
  }
  // JIT is an optimisation only: without it (unsupported platform) matching still works.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

RegexSplit::~RegexSplit() = default;
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit& RegexSplit::operator=(RegexSplit&&) noexcept = default;

void RegexSplit::split(std::string_view text, const std::vector<size_t>& piece_ends,
                       std::vector<size_t>& out) const {
  // One match state per thread, shared by all patterns: creating it (the JIT stack is an mmap)
  // per call cost more than matching short texts. Thread-local keeps concurrent encodes apart.
  thread_local MatchState state;
  size_t begin = 0;
  for (size_t end : piece_ends) {
    split_piece(text, begin, end, state, out);
    begin = end;
  }
}

void RegexSplit::split_piece(std::string_view text, size_t begin, size_t end, MatchState& state,
                             std::vector<size_t>& ends) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
  const size_t length = end - begin;
  size_t offset = 0;
  while (offset < length) {
    // The caller guarantees valid UTF-8 (the tokenizer sanitises input first).
    const int rc = pcre2_match(compiled_->code, subject, length, offset, PCRE2_NO_UTF_CHECK,
                               state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    DI_CHECK(rc >= 0, "PCRE2 match failed with code {}", rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    size_t match_begin = ovector[0];
    size_t match_end = ovector[1];
    if (match_end == match_begin) {
      // Empty match (not produced by the DeepSeek patterns): step one code point and go on.
      ++offset;
      while (offset < length && (static_cast<uint8_t>(subject[offset]) & 0xC0) == 0x80)
        ++offset;
      continue;
    }
    if (match_begin > offset) ends.push_back(begin + match_begin);
    ends.push_back(begin + match_end);
    offset = match_end;
  }
  if (offset < length) ends.push_back(end);
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& split_patterns) {
  steps_.reserve(split_patterns.size());
  for (const auto& pattern : split_patterns)
    steps_.emplace_back(pattern);
}

std::vector<size_t> PreTokenizer::split(std::string_view text) const {
  std::vector<size_t> ends;
  if (text.empty()) return ends;
  ends.push_back(text.size());
  std::vector<size_t> next;
  for (const auto& step : steps_) {
    next.clear();
    step.split(text, ends, next);
    ends.swap(next);
  }
  return ends;
}

}  // namespace di::tokenizer
