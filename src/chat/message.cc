#include "chat/message.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "common/check.h"

namespace di::chat {
namespace {

constexpr std::array<std::pair<Role, std::string_view>, 6> kRoleNames = {{
    {Role::kSystem, "system"},
    {Role::kUser, "user"},
    {Role::kAssistant, "assistant"},
    {Role::kTool, "tool"},
    {Role::kDeveloper, "developer"},
    {Role::kLatestReminder, "latest_reminder"},
}};

constexpr std::array<std::string_view, 6> kTasks = {"action", "query",    "authority",
                                                    "domain", "read_url", "title"};

std::string optional_string(const Json& msg, const char* key, const std::string& where) {
  auto it = msg.find(key);
  if (it == msg.end() || it->is_null()) return {};
  DI_CHECK(it->is_string(), "{}.{}: must be a string", where, key);
  return it->get<std::string>();
}

ContentPart parse_part(const Json& part, const std::string& where) {
  DI_CHECK(part.is_object(), "{}: a content part must be an object", where);
  const std::string type = optional_string(part, "type", where);
  ContentPart out;
  if (type == "text" || type == "input_text" || type == "output_text") {
    out.kind = ContentPart::Kind::kText;
    out.text = optional_string(part, "text", where);
    return out;
  }
  if (type == "image_url" || type == "image" || type == "input_image") {
    out.kind = ContentPart::Kind::kImage;
    if (auto it = part.find("image_url"); it != part.end()) {
      if (it->is_string()) {
        out.image_url = it->get<std::string>();
      } else if (it->is_object()) {
        out.image_url = optional_string(*it, "url", where + ".image_url");
      }
    }
    for (const char* key : {"url", "source", "data"}) {
      if (!out.image_url.empty()) break;
      if (auto it = part.find(key); it != part.end() && it->is_string()) {
        out.image_url = it->get<std::string>();
      }
    }
    DI_CHECK(!out.image_url.empty(), "{}: image part has no url/source/data", where);
    return out;
  }
  DI_FAIL("{}.type: unsupported content part type '{}' (text and image only)", where, type);
}

ToolCall parse_tool_call(const Json& call, const std::string& where) {
  DI_CHECK(call.is_object(), "{}: must be an object", where);
  ToolCall out;
  out.id = optional_string(call, "id", where);
  if (auto it = call.find("type"); it != call.end() && !it->is_null()) {
    DI_CHECK(*it == "function", "{}.type: must be 'function'", where);
  }
  auto fn = call.find("function");
  DI_CHECK(fn != call.end() && fn->is_object(), "{}.function: missing or not an object", where);
  out.name = optional_string(*fn, "name", where + ".function");
  DI_CHECK(!out.name.empty(), "{}.function.name: missing or empty", where);
  auto args = fn->find("arguments");
  if (args == fn->end() || args->is_null()) {
    out.arguments = Json::object();
  } else {
    DI_CHECK(args->is_string() || args->is_object(),
             "{}.function.arguments: must be JSON text or an object", where);
    out.arguments = *args;
  }
  return out;
}

Message parse_message(const Json& msg, size_t index) {
  const std::string where = fmt::format("messages[{}]", index);
  DI_CHECK(msg.is_object(), "{}: must be an object", where);
  auto role_it = msg.find("role");
  DI_CHECK(role_it != msg.end() && role_it->is_string(), "{}.role: missing or not a string", where);
  Message out;
  out.role = parse_role(role_it->get<std::string>(), where + ".role");

  if (auto it = msg.find("content"); it != msg.end() && !it->is_null()) {
    if (it->is_string()) {
      out.content = it->get<std::string>();
    } else {
      DI_CHECK(it->is_array(), "{}.content: must be a string, null or a list of parts", where);
      for (size_t i = 0; i < it->size(); ++i) {
        out.parts.push_back(parse_part((*it)[i], fmt::format("{}.content[{}]", where, i)));
      }
    }
  }
  for (const char* key : {"reasoning_content", "reasoning"}) {
    if (auto it = msg.find(key); it != msg.end() && !it->is_null()) {
      DI_CHECK(it->is_string(), "{}.{}: must be a string", where, key);
      out.reasoning_content = it->get<std::string>();
      break;
    }
  }
  if (auto it = msg.find("tool_calls"); it != msg.end() && !it->is_null()) {
    DI_CHECK(out.role == Role::kAssistant, "{}.tool_calls: only assistant messages carry calls",
             where);
    DI_CHECK(it->is_array(), "{}.tool_calls: must be a list", where);
    for (size_t i = 0; i < it->size(); ++i) {
      out.tool_calls.push_back(
          parse_tool_call((*it)[i], fmt::format("{}.tool_calls[{}]", where, i)));
    }
  }
  out.tool_call_id = optional_string(msg, "tool_call_id", where);
  out.name = optional_string(msg, "name", where);
  if (auto it = msg.find("task"); it != msg.end() && !it->is_null()) {
    DI_CHECK(it->is_string(), "{}.task: must be a string", where);
    out.task = it->get<std::string>();
  }
  if (auto it = msg.find("tools"); it != msg.end() && !it->is_null()) {
    DI_CHECK(out.role == Role::kSystem || out.role == Role::kDeveloper,
             "{}.tools: tools belong on a system or developer message", where);
    validate_tools(*it, where + ".tools");
    out.tools = *it;
  }
  if (auto it = msg.find("response_format"); it != msg.end() && !it->is_null()) {
    out.response_format = *it;
  }
  if (auto it = msg.find("wo_eos"); it != msg.end() && !it->is_null()) {
    DI_CHECK(it->is_boolean(), "{}.wo_eos: must be a boolean", where);
    out.wo_eos = it->get<bool>();
  }
  return out;
}

}  // namespace

std::string_view role_name(Role role) {
  for (const auto& [r, name] : kRoleNames) {
    if (r == role) return name;
  }
  return "?";
}

Role parse_role(std::string_view name, std::string_view where) {
  for (const auto& [r, spelled] : kRoleNames) {
    if (spelled == name) return r;
  }
  DI_FAIL("{}: unknown role '{}' (system, user, assistant, tool, developer, latest_reminder)",
          where, name);
}

bool is_valid_task(std::string_view task) {
  for (std::string_view t : kTasks) {
    if (t == task) return true;
  }
  return false;
}

void validate_tools(const Json& tools, std::string_view where) {
  DI_CHECK(tools.is_array(), "{}: must be a list of tools", where);
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    DI_CHECK(tool.is_object(), "{}: must be an object", at);
    if (auto it = tool.find("type"); it != tool.end() && !it->is_null()) {
      DI_CHECK(*it == "function", "{}.type: must be 'function'", at);
    }
    auto fn = tool.find("function");
    DI_CHECK(fn != tool.end() && fn->is_object(), "{}.function: missing or not an object", at);
    auto name = fn->find("name");
    DI_CHECK(name != fn->end() && name->is_string() && !name->get<std::string>().empty(),
             "{}.function.name: missing or not a non-empty string", at);
    if (auto params = fn->find("parameters"); params != fn->end()) {
      DI_CHECK(params->is_object(), "{}.function.parameters: must be a JSON object", at);
    }
  }
}

std::vector<Message> parse_messages_json(const Json& value) {
  const Json* list = &value;
  const Json* tools = nullptr;
  if (value.is_object()) {
    auto it = value.find("messages");
    DI_CHECK(it != value.end(), "chat input: object without a \"messages\" list");
    list = &*it;
    if (auto t = value.find("tools"); t != value.end() && !t->is_null()) tools = &*t;
  }
  DI_CHECK(list->is_array(), "chat input: \"messages\" must be a list");
  std::vector<Message> out;
  out.reserve(list->size() + 1);
  for (size_t i = 0; i < list->size(); ++i)
    out.push_back(parse_message((*list)[i], i));
  if (tools != nullptr) {
    validate_tools(*tools, "tools");
    auto sys = out.begin();
    while (sys != out.end() && sys->role != Role::kSystem)
      ++sys;
    if (sys == out.end()) {
      Message empty_system;
      empty_system.role = Role::kSystem;
      sys = out.insert(out.begin(), std::move(empty_system));
    }
    sys->tools = *tools;
  }
  return out;
}

std::vector<Message> parse_messages_json(const nlohmann::json& value) {
  return parse_messages_json(Json::parse(value.dump()));
}

Json message_to_json(const Message& message) {
  Json out = Json::object();
  out["role"] = role_name(message.role);
  if (message.parts.empty()) {
    out["content"] = message.content;
  } else {
    Json parts = Json::array();
    for (const ContentPart& part : message.parts) {
      if (part.kind == ContentPart::Kind::kText) {
        parts.push_back({{"type", "text"}, {"text", part.text}});
      } else {
        parts.push_back({{"type", "image_url"}, {"image_url", {{"url", part.image_url}}}});
      }
    }
    out["content"] = std::move(parts);
  }
  if (message.reasoning_content) out["reasoning_content"] = *message.reasoning_content;
  if (!message.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& call : message.tool_calls) {
      Json c = Json::object();
      if (!call.id.empty()) c["id"] = call.id;
      c["type"] = "function";
      c["function"] = {{"name", call.name},
                       {"arguments", call.arguments.is_string() ? call.arguments.get<std::string>()
                                                                : call.arguments.dump()}};
      calls.push_back(std::move(c));
    }
    out["tool_calls"] = std::move(calls);
  }
  if (!message.tool_call_id.empty()) out["tool_call_id"] = message.tool_call_id;
  if (message.task) out["task"] = *message.task;
  if (!message.tools.is_null()) out["tools"] = message.tools;
  if (!message.response_format.is_null()) out["response_format"] = message.response_format;
  if (message.wo_eos) out["wo_eos"] = true;
  return out;
}

}  // namespace di::chat
