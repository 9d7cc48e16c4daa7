#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/encoder.h"
#include "chat/message.h"

namespace di::chat {

// Spellings shared by the encoders and output parsers.
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsmlToken = "｜DSML｜";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kSystemToken = "<｜System｜>";  // V4.1 only
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kImagePlaceholder = "<｜deepseek_image｜>";  // V4.1 only

// Concatenation by append(): GCC 12 reports false -Wrestrict errors on chained operator+.
inline std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts)
    out.append(p);
  return out;
}

// DSML tag names: V4.1 puts a space after the marker (`<｜DSML｜ calls>`), V4 does not and calls
// the block `tool_calls` (`<｜DSML｜tool_calls>`).
struct DsmlTags {
  std::string calls;      // " calls" | "tool_calls"
  std::string invoke;     // " invoke" | "invoke"
  std::string parameter;  // " parameter" | "parameter"

  std::string calls_open() const { return cat({"<", kDsmlToken, calls, ">"}); }
  std::string calls_close() const { return cat({"</", kDsmlToken, calls, ">"}); }
  // What the parsers look for: the block opener without its '>' (the official stop string).
  std::string calls_start() const { return cat({"<", kDsmlToken, calls}); }
  std::string invoke_start() const { return cat({"<", kDsmlToken, invoke}); }
  std::string invoke_end() const { return cat({"</", kDsmlToken, invoke}); }
  std::string parameter_start() const { return cat({"<", kDsmlToken, parameter}); }
  std::string parameter_end() const { return cat({"/", kDsmlToken, parameter}); }
};

const DsmlTags& dsml_tags(ModelVersion version);

// The call arguments as the official encoders see them: an object is used as is; a string is
// parsed as JSON (V4.1 twice, for double-encoded text; V4 once); anything that does not end up an
// object becomes {"arguments": original}.
Json normalize_call_arguments(const Json& arguments, ModelVersion version);

// "<｜DSML｜ calls>\n<｜DSML｜ invoke name=...>\n...\n</｜DSML｜ calls>" for an assistant turn.
std::string render_tool_calls(const std::vector<ToolCall>& calls, ModelVersion version);

// The "## Tools" system-prompt section for an OpenAI tool list (one JSON schema per line).
std::string render_tools_section(const Json& tools, ModelVersion version);

// Parses the inside of a calls block (the text after `calls_start()` up to, not including,
// `calls_close()`). Strict mode throws di::Error on any deviation from the official grammar;
// lenient mode skips malformed invokes/parameters and records a warning. A string="false" value
// that is not JSON is kept as a string in lenient mode.
std::vector<ToolCall> parse_calls_body(std::string_view body, ModelVersion version, bool strict,
                                       std::vector<std::string>* warnings);

}  // namespace di::chat
