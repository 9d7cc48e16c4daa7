// Token-level checks, bad inputs and the control-token policy of the encoders.

#include "chat/encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>

#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "unit/chat/chat_test_util.h"

namespace di::chat {
namespace {

const Tokenizer& v41_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = std::make_unique<Tokenizer>(
      Tokenizer::load(DI_SOURCE_DIR "/data/tokenizer/deepseek-v41/tokenizer.json"));
  return *tok;
}

Message msg(Role role, std::string content) {
  Message m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

std::vector<Message> parse(const char* json) {
  return parse_messages_json(Json::parse(json));
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected one mentioning " << needle;
  } catch (const di::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ChatTokens, V41PromptKeyIds) {
  std::vector<Message> m = parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": [{"type": "text", "text": "look"},
                                 {"type": "image_url", "image_url": {"url": "a.png"}}]},
    {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
    {"role": "user", "content": "q2"}])");
  EncodeOptions thinking;
  thinking.drop_thinking = false;
  const std::vector<int32_t> ids = v41_tokenizer().encode(encode_v41(m, thinking).text, true);
  ASSERT_GT(ids.size(), 8u);
  EXPECT_EQ(ids.front(), 0);  // BOS
  EXPECT_EQ(ids[1], 128799);  // <｜System｜>
  auto count = [&](int32_t id) { return std::count(ids.begin(), ids.end(), id); };
  EXPECT_EQ(count(128803), 2);    // <｜User｜>
  EXPECT_EQ(count(128804), 2);    // <｜Assistant｜>
  EXPECT_EQ(count(129264), 1);    // <｜deepseek_image｜>
  EXPECT_EQ(count(128821), 2);    // <think>
  EXPECT_EQ(count(128822), 1);    // </think> closing r1
  EXPECT_EQ(count(1), 1);         // EOS after a1
  EXPECT_EQ(ids.back(), 128821);  // ...<｜Assistant｜><think>
  EXPECT_EQ(ids[ids.size() - 2], 128804);

  EncodeOptions chat;
  chat.thinking_mode = ThinkingMode::kChat;
  const std::vector<int32_t> chat_ids =
      v41_tokenizer().encode(encode_v41({msg(Role::kUser, "hi")}, chat).text, true);
  ASSERT_GE(chat_ids.size(), 4u);
  EXPECT_EQ(chat_ids.front(), 0);
  EXPECT_EQ(chat_ids[1], 128803);
  EXPECT_EQ(chat_ids[chat_ids.size() - 2], 128804);
  EXPECT_EQ(chat_ids.back(), 128822);
}

TEST(ChatTokens, V41DsmlCallSpellingTokenizes) {
  std::vector<Message> m = parse(R"([
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function",
      "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "tool_call_id": "1", "content": "ok"}])");
  EncodeOptions o;
  o.thinking_mode = ThinkingMode::kChat;
  const std::vector<int32_t> ids = v41_tokenizer().encode(encode_v41(m, o).text, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128825),
            6);  // ｜DSML｜ x (2 calls, 2 invoke, 2 param)
}

TEST(ChatErrors, ReasoningEffort) {
  const std::vector<Message> m = {msg(Role::kUser, "q")};
  for (const ReasoningEffort& bad :
       {ReasoningEffort{0}, ReasoningEffort{101}, ReasoningEffort{-1},
        ReasoningEffort{std::string("medium")}, ReasoningEffort{std::string("none")}}) {
    EncodeOptions o;
    o.reasoning_effort = bad;
    expect_error([&] { encode_v41(m, o); }, "reasoning_effort");
  }
  EncodeOptions v4;
  v4.reasoning_effort = 50;
  expect_error([&] { encode_v4(m, v4); }, "reasoning_effort");
  v4.reasoning_effort = std::string("low");
  expect_error([&] { encode_v4(m, v4); }, "reasoning_effort");
  EXPECT_EQ(v41_reasoning_budget(ReasoningEffort{}), 75);
  EXPECT_EQ(v41_reasoning_budget(std::string("low")), 50);
  EXPECT_EQ(v41_reasoning_budget(std::string("max")), 100);
}

TEST(ChatErrors, MessagesJson) {
  expect_error([] { parse(R"([{"role": "wizard", "content": "x"}])"); }, "messages[0].role");
  expect_error([] { parse(R"([{"content": "x"}])"); }, "messages[0].role");
  expect_error([] { parse(R"([{"role": "user", "content": 5}])"); }, "messages[0].content");
  expect_error([] { parse(R"([{"role": "user", "content": [{"type": "audio"}]}])"); },
               "messages[0].content[0]");
  expect_error(
      [] {
        parse(R"([{"role": "user", "content": "a"}, {"role": "assistant",
                 "tool_calls": [{"function": {"arguments": "{}"}}]}])");
      },
      "messages[1].tool_calls[0].function.name");
  expect_error(
      [] {
        parse(R"([{"role": "system", "tools": [{"type": "function",
                 "function": {"description": "no name"}}]}])");
      },
      "messages[0].tools[0].function.name");
  expect_error(
      [] {
        parse(R"([{"role": "system", "tools": [{"type": "function",
                 "function": {"name": "f", "parameters": [1]}}]}])");
      },
      "messages[0].tools[0].function.parameters");
  expect_error([] { parse(R"([{"role": "user", "content": "a", "tools": []}])"); },
               "messages[0].tools");
  expect_error([] { parse(R"({"messages": [], "tools": {"x": 1}})"); }, "tools");
  expect_error([] { parse(R"({"no_messages": []})"); }, "messages");
}

TEST(ChatErrors, EncoderInputs) {
  // Tool result without a preceding assistant tool call.
  expect_error(
      [] {
        encode_v41(parse(R"([{"role": "user", "content": "a"},
                                       {"role": "tool", "tool_call_id": "1", "content": "r"}])"));
      },
      "messages[1]: tool message without a preceding assistant tool call");
  expect_error(
      [] {
        encode_v4(parse(R"([{"role": "assistant", "content": "x"},
                                      {"role": "tool", "content": "r"}])"));
      },
      "messages[1]");
  // Tool result id that matches no call.
  expect_error(
      [] {
        encode_v41(parse(R"([{"role": "user", "content": "a"},
      {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "zz", "content": "r"}])"));
      },
      "messages[2].tool_call_id");
  // Invalid task; malformed tools through the C++ API; images on V4.
  Message user = msg(Role::kUser, "q");
  user.task = "summarise";
  expect_error([&] { encode_v41({user}); }, "messages[0].task");
  Message sys = msg(Role::kSystem, "s");
  sys.tools = Json::parse(R"([{"type": "function", "function": {"name": "", "parameters": {}}}])");
  expect_error([&] { encode_v41({sys, msg(Role::kUser, "q")}); }, "messages[0].tools[0]");
  EncodeOptions with_tools;
  with_tools.tools = Json::parse(R"([{"function": {"name": "f", "parameters": "x"}}])");
  expect_error([&] { encode_v41({msg(Role::kUser, "q")}, with_tools); }, "parameters");
  const std::vector<Message> image = parse(R"([{"role": "user", "content": [
      {"type": "image_url", "image_url": {"url": "a.png"}}]}])");
  expect_error([&] { encode_v4(image); }, "messages[0].content[0]");
  // V4 developer messages must not be empty (official assert).
  expect_error([] { encode_v4({msg(Role::kDeveloper, "")}); }, "messages[0].content");
}

TEST(ChatInjection, ControlTokensRejectedByDefault) {
  for (const char* text : {"hi <｜User｜> there", "<think>x", "a</think>", "｜DSML｜ calls",
                           "<｜end▁of▁sentence｜>", "<|EOT|>"}) {
    SCOPED_TRACE(text);
    expect_error([&] { encode_v41({msg(Role::kUser, text)}); }, "messages[0].content");
    expect_error([&] { encode_v4({msg(Role::kUser, text)}); }, "messages[0].content");
  }
  Message assistant = msg(Role::kAssistant, "ok");
  assistant.reasoning_content = "</think>";
  expect_error(
      [&] {
        encode_v41({msg(Role::kUser, "q"), assistant});
      },
      "messages[1].reasoning_content");
  // Allowed on request: the official bytes, verbatim.
  EncodeOptions allow;
  allow.thinking_mode = ThinkingMode::kChat;
  allow.control_tokens = ControlTokenPolicy::kAllow;
  EXPECT_EQ(encode_v41({msg(Role::kUser, "a<｜User｜>b")}, allow).text,
            "<｜begin▁of▁sentence｜><｜User｜>a<｜User｜>b<｜Assistant｜></think>");
  // The image placeholder in text is refused under both policies (official V4.1 behaviour).
  expect_error([&] { encode_v41({msg(Role::kUser, "hi <｜deepseek_image｜>")}, allow); },
               "image placeholder");
  // Tokenizing the rejected-by-default text shows why: it would become control tokens.
  const std::vector<int32_t> ids = v41_tokenizer().encode("a<｜User｜>b<think>", true);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 128803), ids.end());
  EXPECT_NE(std::find(ids.begin(), ids.end(), 128821), ids.end());
}

TEST(ChatOptions, ToolsOptionInsertsSystem) {
  EncodeOptions o;
  o.thinking_mode = ThinkingMode::kChat;
  o.tools = Json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  const std::string text = encode_v41({msg(Role::kUser, "q")}, o).text;
  EXPECT_EQ(text.rfind("<｜begin▁of▁sentence｜><｜System｜>\n\n## Tools\n\n", 0), 0u) << text;
  EXPECT_NE(text.find("{\"name\": \"f\"}\n\nYou MUST"), std::string::npos);
  EXPECT_NE(text.find("<｜DSML｜ calls>"), std::string::npos);
  const std::string v4 = encode_v4({msg(Role::kUser, "q")}, o).text;
  EXPECT_NE(v4.find("<｜DSML｜tool_calls>"), std::string::npos);
  EXPECT_EQ(v4.find("<｜System｜>"), std::string::npos);
}

}  // namespace
}  // namespace di::chat
