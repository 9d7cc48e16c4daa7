#include "chat/dsml.h"

#include <fmt/format.h>

#include "chat/python_json.h"
#include "common/check.h"

namespace di::chat {
namespace {

const DsmlTags kV41Tags{" calls", " invoke", " parameter"};
const DsmlTags kV4Tags{"tool_calls", "invoke", "parameter"};

std::string render_arguments(const Json& arguments, const DsmlTags& tags) {
  std::string out;
  bool first = true;
  for (auto it = arguments.begin(); it != arguments.end(); ++it) {
    if (!first) out += "\n";
    first = false;
    const bool is_string = it.value().is_string();
    out += fmt::format("<{}{} name=\"{}\" string=\"{}\">", kDsmlToken, tags.parameter, it.key(),
                       is_string ? "true" : "false");
    out += is_string ? it.value().get<std::string>() : python_json_dumps(it.value());
    out += fmt::format("</{}{}>", kDsmlToken, tags.parameter);
  }
  return out;
}

void report(bool strict, std::vector<std::string>* warnings, const std::string& message) {
  if (strict) DI_FAIL("DSML tool calls: {}", message);
  if (warnings != nullptr) warnings->push_back(message);
}

// Parses ` name="NAME">\n` (leading whitespace allowed, as the official regex does).
bool parse_invoke_header(std::string_view s, std::string* name) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
    ++i;
  constexpr std::string_view kPrefix = "name=\"";
  constexpr std::string_view kSuffix = "\">\n";
  if (s.substr(i, kPrefix.size()) != kPrefix) return false;
  s.remove_prefix(i + kPrefix.size());
  if (s.size() < kSuffix.size() || s.substr(s.size() - kSuffix.size()) != kSuffix) return false;
  *name = std::string(s.substr(0, s.size() - kSuffix.size()));
  return true;
}

// Parses ` name="K" string="true|false">VALUE<` (the text between the parameter start tag and
// "/｜DSML｜ parameter"); the name ends at the first `" string="`.
bool parse_parameter(std::string_view s, std::string* key, bool* is_string, std::string* value) {
  constexpr std::string_view kPrefix = " name=\"";
  if (s.substr(0, kPrefix.size()) != kPrefix || s.empty() || s.back() != '<') return false;
  s.remove_prefix(kPrefix.size());
  s.remove_suffix(1);
  for (std::string_view flag : {"true", "false"}) {
    const std::string sep = fmt::format("\" string=\"{}\">", flag);
    const size_t pos = s.find(sep);
    if (pos == std::string_view::npos) continue;
    // The other flag may occur earlier; the official non-greedy name takes the first separator.
    const std::string other = fmt::format("\" string=\"{}\">", flag == "true" ? "false" : "true");
    const size_t other_pos = s.find(other);
    if (other_pos != std::string_view::npos && other_pos < pos) continue;
    *key = std::string(s.substr(0, pos));
    *is_string = flag == "true";
    *value = std::string(s.substr(pos + sep.size()));
    return true;
  }
  return false;
}

}  // namespace

const DsmlTags& dsml_tags(ModelVersion version) {
  return version == ModelVersion::kV41 ? kV41Tags : kV4Tags;
}

Json normalize_call_arguments(const Json& arguments, ModelVersion version) {
  if (arguments.is_object()) return arguments;
  Json value = arguments;
  const int parses = version == ModelVersion::kV41 ? 2 : 1;
  for (int i = 0; i < parses && value.is_string(); ++i) {
    Json parsed = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) break;
    value = std::move(parsed);
  }
  if (value.is_object()) return value;
  Json wrapped = Json::object();
  wrapped["arguments"] = arguments;
  return wrapped;
}

std::string render_tool_calls(const std::vector<ToolCall>& calls, ModelVersion version) {
  const DsmlTags& tags = dsml_tags(version);
  std::string out = cat({tags.calls_open(), "\n"});
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += "\n";
    out += fmt::format("<{}{} name=\"{}\">\n", kDsmlToken, tags.invoke, calls[i].name);
    out += render_arguments(normalize_call_arguments(calls[i].arguments, version), tags);
    out += fmt::format("\n</{}{}>", kDsmlToken, tags.invoke);
  }
  out += "\n";
  out += tags.calls_close();
  return out;
}

std::string render_tools_section(const Json& tools, ModelVersion version) {
  const DsmlTags& t = dsml_tags(version);
  const std::string_view d = kDsmlToken;
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) schemas += "\n";
    schemas += python_json_dumps(tools[i].at("function"));
  }
  // The instruction text of the official TOOLS_TEMPLATE (identical in V4 and V4.1 apart from
  // the tag names).
  return fmt::format(
      "## Tools\n\n"
      "You have access to a set of tools to help answer the user's question. You can invoke tools "
      "by writing a \"<{d}{c}>\" block like the following:\n\n"
      "<{d}{c}>\n"
      "<{d}{i} name=\"$TOOL_NAME\">\n"
      "<{d}{p} name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{d}{p}>\n"
      "...\n"
      "</{d}{i}>\n"
      "<{d}{i} name=\"$TOOL_NAME2\">\n"
      "...\n"
      "</{d}{i}>\n"
      "</{d}{c}>\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types "
      "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by {ts}), you MUST output your complete reasoning "
      "inside {ts}...{te} BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after {te} with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n"
      "{schemas}\n\n"
      "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
      "calls.\n",
      fmt::arg("d", d), fmt::arg("c", t.calls), fmt::arg("i", t.invoke), fmt::arg("p", t.parameter),
      fmt::arg("ts", kThinkStart), fmt::arg("te", kThinkEnd), fmt::arg("schemas", schemas));
}

std::vector<ToolCall> parse_calls_body(std::string_view body, ModelVersion version, bool strict,
                                       std::vector<std::string>* warnings) {
  const DsmlTags& tags = dsml_tags(version);
  const std::string invoke_start = tags.invoke_start();
  const std::string invoke_end = tags.invoke_end();
  const std::string param_start = tags.parameter_start();
  const std::string param_end = tags.parameter_end();
  std::vector<ToolCall> calls;
  size_t pos = 0;
  while (true) {
    const size_t next = body.find(invoke_start, pos);
    const std::string_view gap =
        body.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos);
    // Official grammar: '>' + newline between the tags, before each invoke and the closer.
    if (gap != ">\n") report(strict, warnings, fmt::format("expected '>\\n' but got '{}'", gap));
    if (next == std::string_view::npos) break;
    pos = next + invoke_start.size();
    // Header up to the first parameter or the invoke end.
    const size_t p = body.find(param_start, pos);
    const size_t e = body.find(invoke_end, pos);
    if (e == std::string_view::npos) {
      report(strict, warnings, "unterminated invoke");
      break;
    }
    const bool has_param = p != std::string_view::npos && p < e;
    const size_t header_end = has_param ? p : e;
    ToolCall call;
    if (!parse_invoke_header(body.substr(pos, header_end - pos), &call.name)) {
      report(strict, warnings,
             fmt::format("tool name format error: '{}'", body.substr(pos, header_end - pos)));
      pos = e + invoke_end.size();
      continue;
    }
    Json args = Json::object();
    bool invoke_ok = true;
    pos = header_end;
    while (pos < body.size() && body.compare(pos, param_start.size(), param_start) == 0) {
      pos += param_start.size();
      const size_t close = body.find(param_end, pos);
      if (close == std::string_view::npos) {
        report(strict, warnings, "unterminated parameter");
        invoke_ok = false;
        pos = body.size();
        break;
      }
      std::string key, value;
      bool is_string = true;
      if (!parse_parameter(body.substr(pos, close - pos), &key, &is_string, &value)) {
        report(strict, warnings,
               fmt::format("parameter format error: '{}'", body.substr(pos, close - pos)));
        invoke_ok = false;
      } else if (args.contains(key)) {
        report(strict, warnings, fmt::format("duplicate parameter name: '{}'", key));
      } else if (is_string) {
        args[key] = value;
      } else {
        Json parsed = Json::parse(value, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) {
          report(strict, warnings, fmt::format("parameter '{}' is not JSON: '{}'", key, value));
          args[key] = value;
        } else {
          args[key] = std::move(parsed);
        }
      }
      pos = close + param_end.size();
      // Then ">\n" and the next parameter or the invoke end.
      const size_t np = body.find(param_start, pos);
      const size_t ne = body.find(invoke_end, pos);
      const size_t stop = std::min(np, ne);
      if (stop == std::string_view::npos) {
        report(strict, warnings, "unterminated invoke");
        invoke_ok = false;
        pos = body.size();
        break;
      }
      if (body.substr(pos, stop - pos) != ">\n") {
        report(strict, warnings,
               fmt::format("expected '>\\n' but got '{}'", body.substr(pos, stop - pos)));
      }
      pos = stop;
    }
    if (pos >= body.size() || body.compare(pos, invoke_end.size(), invoke_end) != 0) {
      if (invoke_ok) report(strict, warnings, "unterminated invoke");
      break;
    }
    pos += invoke_end.size();
    if (invoke_ok) {
      call.arguments = std::move(args);
      calls.push_back(std::move(call));
    }
  }
  return calls;
}

}  // namespace di::chat
