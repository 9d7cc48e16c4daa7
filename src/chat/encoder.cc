#include "chat/encoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "chat/dsml.h"
#include "chat/python_json.h"
#include "common/check.h"

// Native port of the rules of the official DeepSeek encoders (V4.1 encoding/encoding.py, V4
// encoding/encoding_dsv4.py); docs/design/chat.md lists the sources and the deliberate additions
// (validation, control-token policy). Rendering proceeds exactly as the official code: flatten and
// merge (tool results into user turns), sort tool results by call order, drop old reasoning, then
// render each message with a look at its neighbours.

namespace di::chat {
namespace {

constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// The V4 "max" prefix (official REASONING_EFFORT_MAX, encoding_dsv4.py).
constexpr std::string_view kV4MaxEffortPrefix =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

// Spellings that the bundled tokenizers turn into added tokens even inside plain text: every
// `<｜...｜>` token, the ASCII placeholders, and the non-special <think>/</think>/｜DSML｜/<dsml:
// tokens (non-special added tokens are matched even with parse_special_tokens=false).
constexpr std::array<std::string_view, 8> kControlFragments = {
    "<｜", "<|EOT|>", "<|place_holder", "<think>", "</think>", "｜DSML｜", "<dsml:", "</dsml:"};

struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_use_id;
};

// A message after flattening and tool-result merging (no tool role left).
struct Turn {
  Role role = Role::kUser;
  std::string content;
  bool has_blocks = false;  // user turns: rendered from blocks joined by "\n\n"
  std::vector<Block> blocks;
  std::optional<std::string> reasoning;
  std::vector<ToolCall> tool_calls;
  Json tools;
  Json response_format;
  std::optional<std::string> task;
  bool wo_eos = false;
};

struct Effort {
  std::string prefix;  // rendered at index 0 in thinking mode
};

class Encoder {
 public:
  Encoder(ModelVersion version, const EncodeOptions& options)
      : version_(version), options_(options), v41_(version == ModelVersion::kV41) {}

  EncodedPrompt run(const std::vector<Message>& messages);

 private:
  void check_text(std::string_view text, const std::string& where) const;
  std::string flatten(const Message& msg, const std::string& where,
                      std::vector<std::string>* images) const;
  void validate(const Message& msg, const std::string& where) const;
  std::vector<Turn> merge(const std::vector<Message>& msgs, const std::string& label,
                          std::vector<std::string>* images) const;
  bool is_last_user_role(const std::vector<Turn>& turns, size_t idx) const;
  int find_last_user_index(const std::vector<Turn>& turns) const;
  std::vector<Turn> drop_thinking(const std::vector<Turn>& turns) const;
  std::string render(size_t index, const std::vector<Turn>& turns, bool drop) const;

  ModelVersion version_;
  const EncodeOptions& options_;
  bool v41_;
  Effort effort_;
};

std::string label_of(const std::string& label, size_t i) {
  return fmt::format("{}[{}]", label, i);
}

void Encoder::check_text(std::string_view text, const std::string& where) const {
  if (v41_ && text.find(kImagePlaceholder) != std::string_view::npos) {
    DI_FAIL("{}: contains the image placeholder '{}'; images must be image content parts", where,
            kImagePlaceholder);
  }
  if (options_.control_tokens == ControlTokenPolicy::kAllow) return;
  for (std::string_view fragment : kControlFragments) {
    if (text.find(fragment) != std::string_view::npos) {
      DI_FAIL(
          "{}: contains the control-token spelling '{}' (set ControlTokenPolicy::kAllow to "
          "pass it through as the official encoder does)",
          where, fragment);
    }
  }
}

// List content -> text. V4.1: parts joined by "\n\n" with one placeholder per image (official
// process_image_messages); V4 has no vision and takes text parts only.
std::string Encoder::flatten(const Message& msg, const std::string& where,
                             std::vector<std::string>* images) const {
  if (msg.parts.empty()) {
    check_text(msg.content, where + ".content");
    return msg.content;
  }
  std::string out;
  for (size_t i = 0; i < msg.parts.size(); ++i) {
    const ContentPart& part = msg.parts[i];
    const std::string at = fmt::format("{}.content[{}]", where, i);
    if (i > 0) out += "\n\n";
    if (part.kind == ContentPart::Kind::kText) {
      check_text(part.text, at);
      out += part.text;
    } else {
      DI_CHECK(v41_, "{}: DeepSeek-V4 has no vision input; image parts need V4.1", at);
      DI_CHECK(!part.image_url.empty(), "{}: image part without a url", at);
      out += kImagePlaceholder;
      if (images != nullptr) images->push_back(part.image_url);
    }
  }
  return out;
}

void Encoder::validate(const Message& msg, const std::string& where) const {
  if (!msg.tools.is_null()) {
    DI_CHECK(msg.role == Role::kSystem || msg.role == Role::kDeveloper,
             "{}.tools: tools belong on a system or developer message", where);
    validate_tools(msg.tools, where + ".tools");
    check_text(python_json_dumps(msg.tools), where + ".tools");
  }
  if (!msg.response_format.is_null()) {
    check_text(python_json_dumps(msg.response_format), where + ".response_format");
  }
  if (msg.task) {
    DI_CHECK(is_valid_task(*msg.task),
             "{}.task: invalid task '{}' (action, query, authority, domain, title, read_url)",
             where, *msg.task);
  }
  if (msg.reasoning_content) check_text(*msg.reasoning_content, where + ".reasoning_content");
  DI_CHECK(msg.tool_calls.empty() || msg.role == Role::kAssistant,
           "{}.tool_calls: only assistant messages carry tool calls", where);
  for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
    const ToolCall& call = msg.tool_calls[i];
    const std::string at = fmt::format("{}.tool_calls[{}]", where, i);
    DI_CHECK(!call.name.empty(), "{}.name: missing tool name", at);
    DI_CHECK(call.name.find('"') == std::string::npos && call.name.find('>') == std::string::npos,
             "{}.name: '{}' cannot be written into a DSML attribute", at, call.name);
    check_text(call.name, at + ".name");
    check_text(python_json_dumps(normalize_call_arguments(call.arguments, version_)),
               at + ".arguments");
  }
  if (msg.role == Role::kDeveloper && !v41_) {
    // Official V4: `assert content` for the developer role.
    DI_CHECK(!msg.content.empty() || !msg.parts.empty(), "{}.content: developer message is empty",
             where);
  }
}

std::vector<Turn> Encoder::merge(const std::vector<Message>& msgs, const std::string& label,
                                 std::vector<std::string>* images) const {
  std::vector<Turn> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Message& msg = msgs[i];
    const std::string where = label_of(label, i);
    validate(msg, where);
    std::string content = flatten(msg, where, images);
    if (msg.role == Role::kTool) {
      check_text(msg.tool_call_id, where + ".tool_call_id");
      Block block{true, std::move(content), msg.tool_call_id};
      if (!out.empty() && out.back().role == Role::kUser && out.back().has_blocks) {
        out.back().blocks.push_back(std::move(block));
      } else {
        Turn turn;
        turn.role = Role::kUser;
        turn.has_blocks = true;
        turn.blocks.push_back(std::move(block));
        out.push_back(std::move(turn));
      }
      continue;
    }
    if (msg.role == Role::kUser) {
      Block block{false, content, {}};
      if (!out.empty() && out.back().role == Role::kUser && out.back().has_blocks &&
          !out.back().task) {
        // Consecutive user turns (and a user turn after tool results) are joined; as in the
        // official merge, the joined message's own fields (task, ...) are not carried over.
        out.back().blocks.push_back(std::move(block));
        continue;
      }
    }
    Turn turn;
    // V4.1 has no developer role: vLLM's V4.1 wrapper renders developer messages as system ones.
    turn.role = (v41_ && msg.role == Role::kDeveloper) ? Role::kSystem : msg.role;
    turn.content = content;
    if (msg.role == Role::kUser) {
      turn.has_blocks = true;
      turn.blocks.push_back(Block{false, std::move(content), {}});
    }
    turn.reasoning = msg.reasoning_content;
    turn.tool_calls = msg.tool_calls;
    turn.tools = msg.tools;
    turn.response_format = msg.response_format;
    turn.task = msg.task;
    turn.wo_eos = msg.wo_eos;
    out.push_back(std::move(turn));
  }
  return out;
}

// Reorders the tool results of each user turn to the call order of the latest assistant turn
// with calls (stable; unknown ids sort as position 0), as official sort_tool_results_by_call_order.
void sort_tool_results(std::vector<Turn>& turns) {
  std::map<std::string, size_t> order;
  for (Turn& turn : turns) {
    if (turn.role == Role::kAssistant && !turn.tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < turn.tool_calls.size(); ++i) {
        if (!turn.tool_calls[i].id.empty()) order.emplace(turn.tool_calls[i].id, i);
      }
    } else if (turn.role == Role::kUser && turn.has_blocks) {
      std::vector<Block> results;
      for (const Block& b : turn.blocks) {
        if (b.tool_result) results.push_back(b);
      }
      if (results.size() < 2 || order.empty()) continue;
      auto key = [&](const Block& b) {
        auto it = order.find(b.tool_use_id);
        return it == order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return key(a) < key(b); });
      size_t next = 0;
      for (Block& b : turn.blocks) {
        if (b.tool_result) b = results[next++];
      }
    }
  }
}

bool Encoder::is_last_user_role(const std::vector<Turn>& turns, size_t idx) const {
  const Role role = turns[idx].role;
  if (v41_) return role == Role::kUser || (role == Role::kSystem && idx > 0);
  return role == Role::kUser || role == Role::kDeveloper;
}

int Encoder::find_last_user_index(const std::vector<Turn>& turns) const {
  for (size_t i = turns.size(); i-- > 0;) {
    if (is_last_user_role(turns, i)) return static_cast<int>(i);
  }
  return -1;
}

// Official _drop_thinking_messages: before the last user turn, assistant turns lose their
// reasoning and turns of other roles (developer) are dropped.
std::vector<Turn> Encoder::drop_thinking(const std::vector<Turn>& turns) const {
  const int last_user = find_last_user_index(turns);
  std::vector<Turn> out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Role role = turns[i].role;
    const bool keep = role == Role::kUser || role == Role::kSystem ||
                      role == Role::kLatestReminder || static_cast<int>(i) >= last_user;
    if (keep) {
      out.push_back(turns[i]);
    } else if (role == Role::kAssistant) {
      out.push_back(turns[i]);
      out.back().reasoning.reset();
    }
  }
  return out;
}

std::string render_user_blocks(const Turn& turn) {
  std::string out;
  for (size_t i = 0; i < turn.blocks.size(); ++i) {
    if (i > 0) out += "\n\n";
    const Block& b = turn.blocks[i];
    out += b.tool_result ? cat({"<tool_result>", b.text, "</tool_result>"}) : b.text;
  }
  return out;
}

std::string task_token(const std::string& task) {
  return fmt::format("<｜{}｜>", task);
}

std::string Encoder::render(size_t index, const std::vector<Turn>& turns, bool drop) const {
  const Turn& msg = turns[index];
  const bool thinking = options_.thinking_mode == ThinkingMode::kThinking;
  const int last_user = find_last_user_index(turns);
  std::string prompt;

  if (v41_) {
    const bool effort_here = index == 0 && thinking;
    if (index == 0 && (effort_here || msg.role == Role::kSystem)) prompt += kSystemToken;
    if (effort_here) prompt += effort_.prefix;
  } else if (index == 0 && thinking) {
    prompt += effort_.prefix;
  }

  auto append_tools_and_format = [&](std::string& out) {
    if (!msg.tools.is_null() && !msg.tools.empty()) {
      out += "\n\n";
      out += render_tools_section(msg.tools, version_);
    }
    if (!msg.response_format.is_null() && !msg.response_format.empty()) {
      out += cat({"\n\n", kResponseFormatPrefix, python_json_dumps(msg.response_format)});
    }
  };

  switch (msg.role) {
    case Role::kSystem:
      if (v41_ && index > 0) prompt += kSystemToken;
      prompt += msg.content;
      append_tools_and_format(prompt);
      break;
    case Role::kDeveloper:  // V4 only (V4.1 maps developer to system)
      prompt += kUserToken;
      prompt += msg.content;
      append_tools_and_format(prompt);
      break;
    case Role::kUser:
      prompt += kUserToken;
      prompt += msg.has_blocks ? render_user_blocks(msg) : msg.content;
      break;
    case Role::kLatestReminder:
      prompt += kLatestReminderToken;
      prompt += msg.content;
      break;
    case Role::kAssistant: {
      std::string calls;
      if (!msg.tool_calls.empty())
        calls = cat({"\n\n", render_tool_calls(msg.tool_calls, version_)});
      const bool prev_has_task = index > 0 && turns[index - 1].task.has_value();
      std::string thinking_part;
      if (thinking && !prev_has_task && (!drop || static_cast<int>(index) > last_user)) {
        thinking_part = cat({msg.reasoning.value_or(""), kThinkEnd});
      }
      prompt += cat({thinking_part, msg.content, calls});
      if (!msg.wo_eos) prompt += kEos;
      break;
    }
    case Role::kTool:
      DI_FAIL("internal: tool turn survived merging");
  }

  // Transition tokens depend on what follows.
  if (index + 1 < turns.size() && turns[index + 1].role != Role::kAssistant &&
      turns[index + 1].role != Role::kLatestReminder) {
    return prompt;
  }
  if (msg.task) {
    if (*msg.task != "action") {
      prompt += task_token(*msg.task);
    } else {
      prompt += kAssistantToken;
      prompt += thinking ? kThinkStart : kThinkEnd;
      prompt += task_token(*msg.task);
    }
  } else if (is_last_user_role(turns, index)) {
    prompt += kAssistantToken;
    const bool open_thinking = thinking && (!drop || static_cast<int>(index) >= last_user);
    prompt += open_thinking ? kThinkStart : kThinkEnd;
  }
  return prompt;
}

EncodedPrompt Encoder::run(const std::vector<Message>& messages) {
  // Reasoning effort: validated for every call (the official code asserts it per message).
  if (v41_) {
    effort_.prefix = fmt::format(
        "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the "
        "reasoning)\n\n",
        v41_reasoning_budget(options_.reasoning_effort));
  } else {
    const ReasoningEffort& e = options_.reasoning_effort;
    if (const auto* s = std::get_if<std::string>(&e)) {
      DI_CHECK(*s == "high" || *s == "max",
               "reasoning_effort: '{}' is invalid for DeepSeek-V4 (high or max)", *s);
      if (*s == "max") effort_.prefix = kV4MaxEffortPrefix;
    } else {
      DI_CHECK(std::holds_alternative<std::monostate>(e),
               "reasoning_effort: DeepSeek-V4 takes 'high' or 'max', not a number");
    }
  }

  std::vector<Message> context = options_.context;
  std::vector<Message> current = messages;
  if (!options_.tools.is_null()) {
    validate_tools(options_.tools, "options.tools");
    auto attach = [&](std::vector<Message>& list) {
      for (Message& m : list) {
        if (m.role == Role::kSystem) {
          m.tools = options_.tools;
          return true;
        }
      }
      return false;
    };
    if (!attach(context) && !attach(current)) {
      Message system;
      system.role = Role::kSystem;
      system.tools = options_.tools;
      std::vector<Message>& front = context.empty() ? current : context;
      front.insert(front.begin(), std::move(system));
    }
  }

  // A tool result needs an earlier assistant turn with calls (and a matching id when it has one).
  {
    const Message* last_assistant = nullptr;
    auto check = [&](const std::vector<Message>& list, const std::string& label) {
      for (size_t i = 0; i < list.size(); ++i) {
        const Message& m = list[i];
        if (m.role == Role::kAssistant) last_assistant = &m;
        if (m.role != Role::kTool) continue;
        DI_CHECK(last_assistant != nullptr && !last_assistant->tool_calls.empty(),
                 "{}: tool message without a preceding assistant tool call", label_of(label, i));
        if (m.tool_call_id.empty()) continue;
        const bool ids_known =
            std::any_of(last_assistant->tool_calls.begin(), last_assistant->tool_calls.end(),
                        [](const ToolCall& c) { return !c.id.empty(); });
        const bool match =
            std::any_of(last_assistant->tool_calls.begin(), last_assistant->tool_calls.end(),
                        [&](const ToolCall& c) { return c.id == m.tool_call_id; });
        DI_CHECK(!ids_known || match,
                 "{}.tool_call_id: '{}' matches no call of the preceding assistant message",
                 label_of(label, i), m.tool_call_id);
      }
    };
    check(context, "context");
    check(current, "messages");
  }

  EncodedPrompt result;
  std::vector<Turn> ctx = merge(context, "context", nullptr);
  std::vector<Turn> cur = merge(current, "messages", &result.image_urls);
  std::vector<Turn> full = ctx;
  full.insert(full.end(), cur.begin(), cur.end());
  sort_tool_results(full);

  if (options_.add_bos && ctx.empty()) result.text += kBos;

  bool drop = options_.drop_thinking;
  for (const Turn& t : full) {
    if (!t.tools.is_null() && !t.tools.empty()) drop = false;
  }
  size_t first = ctx.size();
  if (options_.thinking_mode == ThinkingMode::kThinking && drop) {
    std::vector<Turn> sorted_ctx(full.begin(), full.begin() + static_cast<ptrdiff_t>(ctx.size()));
    const size_t kept_context = drop_thinking(sorted_ctx).size();
    full = drop_thinking(full);
    const size_t to_render = full.size() - kept_context;
    first = full.size() - to_render;
  }
  for (size_t i = first; i < full.size(); ++i)
    result.text += render(i, full, drop);
  return result;
}

}  // namespace

int v41_reasoning_budget(const ReasoningEffort& effort) {
  if (std::holds_alternative<std::monostate>(effort)) return 75;
  if (const int* budget = std::get_if<int>(&effort)) {
    DI_CHECK(*budget >= 1 && *budget <= 100,
             "reasoning_effort: {} is out of range (integer 1..100 or low/high/max)", *budget);
    return *budget;
  }
  const std::string& alias = std::get<std::string>(effort);
  if (alias == "low") return 50;
  if (alias == "high") return 75;
  if (alias == "max") return 100;
  DI_FAIL("reasoning_effort: '{}' is invalid for DeepSeek-V4.1 (integer 1..100 or low/high/max)",
          alias);
}

EncodedPrompt encode(ModelVersion version, const std::vector<Message>& messages,
                     const EncodeOptions& options) {
  return Encoder(version, options).run(messages);
}

EncodedPrompt encode_v41(const std::vector<Message>& messages, const EncodeOptions& options) {
  return encode(ModelVersion::kV41, messages, options);
}

EncodedPrompt encode_v4(const std::vector<Message>& messages, const EncodeOptions& options) {
  return encode(ModelVersion::kV4, messages, options);
}

}  // namespace di::chat
