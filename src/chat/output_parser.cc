#include "chat/output_parser.h"

#include <algorithm>
#include <array>

#include "chat/dsml.h"
#include "common/check.h"

namespace di::chat {
namespace {

struct Stop {
  size_t pos = std::string::npos;
  size_t length = 0;
  int which = -1;
};

Stop find_first(std::string_view text, const std::vector<std::string_view>& stops) {
  Stop best;
  for (size_t i = 0; i < stops.size(); ++i) {
    const size_t pos = text.find(stops[i]);
    if (pos != std::string_view::npos && pos < best.pos) {
      best = Stop{pos, stops[i].size(), static_cast<int>(i)};
    }
  }
  return best;
}

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`.
size_t partial_stop_suffix(std::string_view text, const std::vector<std::string_view>& stops) {
  size_t best = 0;
  for (std::string_view stop : stops) {
    const size_t max_len = std::min(text.size(), stop.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == stop.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

// Bytes at the end of `text` that start a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(n, 4); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    if ((c & 0xF0) == 0xE0) need = 3;
    if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? back : 0;
  }
  return 0;
}

}  // namespace

Message ParsedCompletion::to_message() const {
  Message m;
  m.role = Role::kAssistant;
  m.content = content;
  if (!reasoning_content.empty()) m.reasoning_content = reasoning_content;
  m.tool_calls = tool_calls;
  return m;
}

StreamingParser::StreamingParser(ModelVersion version, ThinkingMode mode)
    : version_(version),
      state_(mode == ThinkingMode::kThinking ? State::kReasoning : State::kContent) {
  const DsmlTags& tags = dsml_tags(version);
  calls_start_ = tags.calls_start();
  calls_start_nl_ = cat({"\n\n", calls_start_});
  calls_close_ = tags.calls_close();
}

void StreamingParser::emit(std::string_view text, ParserDelta& delta) {
  if (text.empty()) return;
  if (state_ == State::kReasoning) {
    result_.reasoning_content += text;
    delta.reasoning += text;
  } else {
    result_.content += text;
    delta.content += text;
  }
}

void StreamingParser::process(bool final, ParserDelta& delta) {
  while (true) {
    switch (state_) {
      case State::kReasoning:
      case State::kContent: {
        std::vector<std::string_view> stops = {calls_start_nl_, calls_start_, kEos};
        if (state_ == State::kReasoning) stops.push_back(kThinkEnd);
        const Stop stop = find_first(buf_, stops);
        if (stop.pos == std::string::npos) {
          size_t keep = final ? 0 : partial_stop_suffix(buf_, stops);
          if (!final) keep = std::max(keep, incomplete_utf8_tail(buf_));
          emit(std::string_view(buf_).substr(0, buf_.size() - keep), delta);
          buf_.erase(0, buf_.size() - keep);
          if (final && state_ == State::kReasoning) result_.missing_think_end = true;
          return;
        }
        emit(std::string_view(buf_).substr(0, stop.pos), delta);
        const std::string_view matched = stops[static_cast<size_t>(stop.which)];
        buf_.erase(0, stop.pos + stop.length);
        if (matched == kThinkEnd) {
          state_ = State::kContent;
        } else if (matched == kEos) {
          if (state_ == State::kReasoning) result_.missing_think_end = true;
          result_.saw_eos = true;
          state_ = State::kDone;
        } else {
          if (state_ == State::kReasoning) result_.missing_think_end = true;
          if (matched == calls_start_) {
            result_.warnings.push_back("tool calls block not preceded by a blank line");
          }
          state_ = State::kCalls;
        }
        break;
      }
      case State::kCalls: {
        const size_t close = buf_.find(calls_close_);
        if (close == std::string::npos && !final) return;
        const std::string_view body =
            std::string_view(buf_).substr(0, close == std::string::npos ? buf_.size() : close);
        if (close == std::string::npos) result_.warnings.push_back("unterminated tool calls block");
        std::vector<ToolCall> calls =
            parse_calls_body(body, version_, /*strict=*/false, &result_.warnings);
        for (ToolCall& call : calls) {
          delta.tool_calls.push_back(call);
          result_.tool_calls.push_back(std::move(call));
        }
        if (close == std::string::npos) {
          buf_.clear();
          state_ = State::kDone;
          return;
        }
        buf_.erase(0, close + calls_close_.size());
        // Official grammar: EOS right after the block; anything else is kept as content.
        state_ = State::kContent;
        break;
      }
      case State::kDone:
        if (!buf_.empty()) {
          result_.warnings.push_back("text after the end of the turn ignored");
          buf_.clear();
        }
        return;
    }
  }
}

ParserDelta StreamingParser::feed(std::string_view text) {
  DI_CHECK(!finished_, "StreamingParser::feed after finish");
  ParserDelta delta;
  buf_.append(text);
  process(false, delta);
  return delta;
}

ParserDelta StreamingParser::finish() {
  ParserDelta delta;
  if (finished_) return delta;
  process(true, delta);
  finished_ = true;
  return delta;
}

ParsedCompletion parse_completion(std::string_view text, ModelVersion version, ThinkingMode mode) {
  StreamingParser parser(version, mode);
  parser.feed(text);
  parser.finish();
  return parser.result();
}

ParsedCompletion parse_completion_strict(std::string_view text, ModelVersion version,
                                         ThinkingMode mode) {
  const DsmlTags& tags = dsml_tags(version);
  const std::string calls_start = cat({"\n\n", tags.calls_start()});
  const std::string calls_close = tags.calls_close();
  ParsedCompletion out;
  size_t pos = 0;
  auto read_until = [&](std::initializer_list<std::string_view> stops, std::string* content) {
    Stop best;
    int i = 0;
    for (std::string_view s : stops) {
      const size_t p = text.find(s, pos);
      if (p != std::string_view::npos && p < best.pos) best = Stop{p, s.size(), i};
      ++i;
    }
    if (best.which < 0) {
      *content = std::string(text.substr(pos));
      pos = text.size();
      return -1;
    }
    *content = std::string(text.substr(pos, best.pos - pos));
    pos = best.pos + best.length;
    return best.which;
  };

  if (mode == ThinkingMode::kThinking) {
    const int stop = read_until({kThinkEnd, calls_start}, &out.reasoning_content);
    DI_CHECK(stop == 0, "completion: invalid thinking format, missing </think>");
  }
  const int stop = read_until({kEos, calls_start}, &out.content);
  if (stop == 1) {
    const size_t close = text.find(calls_close, pos);
    DI_CHECK(close != std::string_view::npos, "completion: unterminated tool calls block");
    out.tool_calls =
        parse_calls_body(text.substr(pos, close - pos), version, /*strict=*/true, nullptr);
    pos = close + calls_close.size();
    std::string after;
    const int eos = read_until({kEos}, &after);
    DI_CHECK(after.empty(), "completion: unexpected content after tool calls");
    DI_CHECK(eos == 0, "completion: missing EOS token");
  } else {
    DI_CHECK(stop == 0, "completion: missing EOS token");
  }
  DI_CHECK(pos == text.size(), "completion: unexpected content at end");
  out.saw_eos = true;
  for (std::string_view token : {kBos, kEos, kThinkStart, kThinkEnd, kDsmlToken}) {
    DI_CHECK(out.content.find(token) == std::string::npos &&
                 out.reasoning_content.find(token) == std::string::npos,
             "completion: unexpected special token '{}' in content", token);
  }
  return out;
}

}  // namespace di::chat
