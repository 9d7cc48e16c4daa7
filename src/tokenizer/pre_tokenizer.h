#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace di::tokenizer {

struct MatchState;

// One `Split(pattern, behavior="Isolated", invert=false)` step of a Hugging Face pre-tokenizer
// sequence: matches and the gaps between them both become pieces. Compiled with PCRE2 (UTF + UCP,
// JIT when available); the compiled pattern is immutable and shared by concurrent callers.
class RegexSplit {
 public:
  explicit RegexSplit(std::string_view hf_pattern);
  ~RegexSplit();
  RegexSplit(RegexSplit&&) noexcept;
  RegexSplit& operator=(RegexSplit&&) noexcept;

  // Re-splits each piece of `text` (given by its end offsets, the first starting at 0) and writes
  // the new piece ends to `out`. `text` must be valid UTF-8. The pattern sees only one piece at a
  // time, as in HF, so look-ahead cannot cross into the next piece.
  void split(std::string_view text, const std::vector<size_t>& piece_ends,
             std::vector<size_t>& out) const;

 private:
  void split_piece(std::string_view text, size_t begin, size_t end, MatchState& state,
                   std::vector<size_t>& ends) const;

  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// Makes PCRE2 read an HF (Oniguruma) pattern the way HF does: Oniguruma's \s is the Unicode
// White_Space set while PCRE2's UCP \s also has U+180E, so \s and \S become explicit classes;
// and \p{L}, \p{N}, \p{P} gain the code points assigned after PCRE2's Unicode tables
// (unicode_delta.inc, probed from HF). Exposed for tests.
std::string rewrite_for_pcre2(std::string_view pattern);

// The DeepSeek pre-tokenizer: a sequence of isolating regex splits; each step re-splits the
// pieces of the previous one. Returns piece end offsets (the first piece starts at 0).
class PreTokenizer {
 public:
  explicit PreTokenizer(const std::vector<std::string>& split_patterns);

  std::vector<size_t> split(std::string_view text) const;

 private:
  std::vector<RegexSplit> steps_;
};

}  // namespace di::tokenizer
