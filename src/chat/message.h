#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace di::chat {

// Insertion-ordered JSON: the official encoders serialise Python dicts, whose key order is the
// order the client wrote, so tool schemas and call arguments must keep theirs.
using Json = nlohmann::ordered_json;

enum class Role { kSystem, kUser, kAssistant, kTool, kDeveloper, kLatestReminder };

std::string_view role_name(Role role);
// Throws di::Error naming `where` for an unknown role spelling.
Role parse_role(std::string_view name, std::string_view where);

struct ContentPart {
  enum class Kind { kText, kImage };
  Kind kind = Kind::kText;
  std::string text;       // kText
  std::string image_url;  // kImage: the URL/path of the image (kept in prompt order)
};

struct ToolCall {
  std::string id;
  std::string name;
  // Normally a JSON object. A string is taken as the OpenAI `function.arguments` text and parsed
  // at encode time exactly as the official encoders do.
  Json arguments = Json::object();
};

// One chat message in the OpenAI shape plus the DeepSeek extensions (`task`, `wo_eos`,
// `latest_reminder`). `content` is used when `parts` is empty; a non-empty `parts` is the list
// form (text and image parts).
struct Message {
  Role role = Role::kUser;
  std::string content;
  std::vector<ContentPart> parts;
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
  std::string name;                  // tool (informational)
  std::optional<std::string> task;   // action|query|authority|domain|title|read_url
  Json tools;                        // system/developer: OpenAI tool list, null when absent
  Json response_format;              // system/developer: null when absent
  bool wo_eos = false;               // assistant: render without EOS (prefill continuation)
};

// Turns OpenAI-style chat JSON (an array of messages, or an object with "messages" and optional
// "tools") into the message model; errors (di::Error) name the message index and field. Request
// level "tools" are attached to the first system message, inserting an empty one at the front when
// there is none (what vLLM's DeepSeek-V4.1 wrapper does). Parse the text with
// nlohmann::ordered_json::parse: the ordered overload keeps the client's key order, which the
// rendered tool schemas reproduce; the nlohmann::json overload sees keys already sorted.
std::vector<Message> parse_messages_json(const Json& value);
std::vector<Message> parse_messages_json(const nlohmann::json& value);

// True for the quick-instruction task names of the official encoders.
bool is_valid_task(std::string_view task);

// Checks an OpenAI tool list: an array of {"type": "function", "function": {"name": non-empty
// string, "parameters": object (optional)}}. `where` prefixes the error message.
void validate_tools(const Json& tools, std::string_view where);

// Converts the message model back to OpenAI-style JSON (assistant tool-call arguments as JSON
// text), e.g. to hand a parsed completion back to a client.
Json message_to_json(const Message& message);

}  // namespace di::chat
