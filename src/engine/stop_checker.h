#pragma once

// Stop strings over streamed output text (vLLM semantics): the text ends right before the first
// occurrence of any stop string (or right after it with include_stop_str_in_output), and the
// request finishes with that string as its stop reason. While a request runs, the text that
// could still turn out to be the start of a stop string is held back, so a stream never shows
// text that the final output does not contain.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace di {

class StopChecker {
 public:
  StopChecker(std::vector<std::string> stop, bool include_stop_str_in_output);

  // Appends newly decoded text. Returns the stop string when the text now contains one (the
  // earliest occurrence wins; among stop strings starting at the same byte, the first listed).
  std::optional<std::string> append(const std::string& text);

  // The output text: everything appended, cut at the stop string once one was found.
  const std::string& text() const { return text_; }
  // Text safe to show while running: held back by up to (longest stop string - 1) bytes, never
  // splitting a UTF-8 sequence; all of text() once stopped or finished.
  std::string_view stable_text(bool finished) const;
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  bool include_;
  size_t max_len_ = 0;
  std::string text_;
  bool stopped_ = false;
};

}  // namespace di
