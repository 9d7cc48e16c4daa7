#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/encoder.h"
#include "chat/message.h"

namespace di::chat {

struct ParsedCompletion {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;  // arguments are JSON objects; ids are left empty
  bool saw_eos = false;
  // Thinking mode: the output reached tool calls or EOS without `</think>` (the text so far is
  // taken as reasoning; the calls are still parsed).
  bool missing_think_end = false;
  std::vector<std::string> warnings;  // lenient-mode deviations from the official grammar

  // The assistant message (reasoning_content set when non-empty).
  Message to_message() const;
};

// What one feed() released. Reasoning/content deltas never contain any part of the DSML markup or
// of `</think>`: a tail that could be the beginning of a tag (or of a UTF-8 character) is held
// back until the next feed decides it.
struct ParserDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // calls completed by this feed
};

// Incremental, lenient parser of one generated assistant turn. Feed it the detokenized text
// deltas (EOS spelled out or not at all); `finish()` flushes what was held back. Tool calls are
// recognised only in the version's own DSML spelling: the other version's tags stay text.
class StreamingParser {
 public:
  StreamingParser(ModelVersion version, ThinkingMode mode);

  ParserDelta feed(std::string_view text);
  ParserDelta finish();
  const ParsedCompletion& result() const { return result_; }

 private:
  enum class State { kReasoning, kContent, kCalls, kDone };

  void process(bool final, ParserDelta& delta);
  void emit(std::string_view text, ParserDelta& delta);

  ModelVersion version_;
  State state_;
  std::string buf_;
  std::string calls_start_;
  std::string calls_start_nl_;
  std::string calls_close_;
  ParsedCompletion result_;
  bool finished_ = false;
};

// One-shot lenient parse: the same result as feeding `text` to a StreamingParser in any chunking.
ParsedCompletion parse_completion(std::string_view text, ModelVersion version, ThinkingMode mode);

// The official parse_message_from_completion_text grammar: `</think>` required in thinking mode,
// EOS required, calls only as "\n\n" + block right before EOS, no control tokens left in
// reasoning/content. Throws di::Error on any deviation (so V4.1 rejects V4-spelled calls and the
// other way round).
ParsedCompletion parse_completion_strict(std::string_view text, ModelVersion version,
                                         ThinkingMode mode);

}  // namespace di::chat
