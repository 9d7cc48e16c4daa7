// Output parsers: round trip with the encoders, streaming at every split point, version spelling.

#include <gtest/gtest.h>

#include <random>

#include "chat/dsml.h"
#include "chat/output_parser.h"
#include "common/error.h"
#include "unit/chat/chat_test_util.h"

namespace di::chat {
namespace {

// Renders one assistant turn (reasoning + content + calls + EOS) with the real encoder.
std::string render_turn(ModelVersion version, const Message& assistant, ThinkingMode mode) {
  Message user;
  user.role = Role::kUser;
  user.content = "question";
  EncodeOptions o;
  o.thinking_mode = mode;
  o.context = {user};
  return encode(version, {assistant}, o).text;
}

Message sample_turn() {
  return parse_messages_json(Json::parse(R"([{"role": "assistant",
    "reasoning_content": "Need <b>two</b> calls\n\nthen answer; 日本語 ✓",
    "content": "Calling tools now.\n",
    "tool_calls": [
      {"id": "1", "function": {"name": "get_weather",
        "arguments": "{\"city\": \"北京\", \"days\": 3, \"metric\": true}"}},
      {"id": "2", "function": {"name": "search",
        "arguments": "{\"query\": \"a < b > c \\\"q\\\"\\nline\", \"filters\": {\"lang\": [\"en\", 2.5]}, \"none\": null}"}}]}])"))
      [0];
}

void expect_same_calls(const std::vector<ToolCall>& got, const std::vector<ToolCall>& want,
                       ModelVersion version) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].arguments, normalize_call_arguments(want[i].arguments, version));
  }
}

const std::vector<std::string> kMarkup = {"｜DSML｜", "<｜", "</think>", "｜>"};

void check_stream(ModelVersion version, ThinkingMode mode, const std::string& text,
                  const std::vector<size_t>& cuts, const ParsedCompletion& want) {
  StreamingParser parser(version, mode);
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  size_t prev = 0;
  auto take = [&](const ParserDelta& d) {
    for (const std::string& m : kMarkup) {
      ASSERT_EQ(d.content.find(m), std::string::npos) << "markup in content delta: " << d.content;
      ASSERT_EQ(d.reasoning.find(m), std::string::npos) << "markup in reasoning: " << d.reasoning;
    }
    reasoning += d.reasoning;
    content += d.content;
    calls.insert(calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  };
  for (size_t cut : cuts) {
    take(parser.feed(std::string_view(text).substr(prev, cut - prev)));
    prev = cut;
  }
  take(parser.feed(std::string_view(text).substr(prev)));
  take(parser.finish());
  EXPECT_EQ(reasoning, want.reasoning_content);
  EXPECT_EQ(content, want.content);
  EXPECT_EQ(parser.result().content, want.content);
  ASSERT_EQ(calls.size(), want.tool_calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].name, want.tool_calls[i].name);
    EXPECT_EQ(calls[i].arguments, want.tool_calls[i].arguments);
  }
}

class ParserVersions : public ::testing::TestWithParam<std::tuple<ModelVersion, ThinkingMode>> {};

TEST_P(ParserVersions, RoundTripAndStreamingAtEverySplit) {
  const auto [version, mode] = GetParam();
  const Message turn = sample_turn();
  const std::string text = render_turn(version, turn, mode);
  const ParsedCompletion strict = parse_completion_strict(text, version, mode);
  const ParsedCompletion lenient = parse_completion(text, version, mode);
  EXPECT_EQ(strict.content, turn.content);
  EXPECT_EQ(strict.reasoning_content,
            mode == ThinkingMode::kThinking ? *turn.reasoning_content : "");
  expect_same_calls(strict.tool_calls, turn.tool_calls, version);
  EXPECT_EQ(lenient.content, strict.content);
  EXPECT_EQ(lenient.reasoning_content, strict.reasoning_content);
  expect_same_calls(lenient.tool_calls, turn.tool_calls, version);
  EXPECT_TRUE(lenient.warnings.empty());
  // Re-encoding the parsed message reproduces the turn.
  Message again = strict.to_message();
  EXPECT_EQ(render_turn(version, again, mode), text);

  // Every single split point (byte level), char-by-char, and random chunkings.
  for (size_t cut = 1; cut < text.size(); ++cut) {
    SCOPED_TRACE(cut);
    check_stream(version, mode, text, {cut}, lenient);
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < text.size(); ++i)
    every_byte.push_back(i);
  check_stream(version, mode, text, every_byte, lenient);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> cuts;
    for (size_t pos = 0;;) {
      pos += 1 + rng() % 12;
      if (pos >= text.size()) break;
      cuts.push_back(pos);
    }
    check_stream(version, mode, text, cuts, lenient);
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, ParserVersions,
    ::testing::Combine(::testing::Values(ModelVersion::kV41, ModelVersion::kV4),
                       ::testing::Values(ThinkingMode::kThinking, ThinkingMode::kChat)));

std::string swap_spelling(std::string text, const DsmlTags& from, const DsmlTags& to) {
  for (const auto& [a, b] : {std::pair{from.calls, to.calls}, std::pair{from.invoke, to.invoke},
                             std::pair{from.parameter, to.parameter}}) {
    const std::string needle = cat({kDsmlToken, a});
    const std::string repl = cat({kDsmlToken, b});
    for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p)) {
      text.replace(p, needle.size(), repl);
      p += repl.size();
    }
  }
  return text;
}

TEST(ChatParser, OtherVersionSpellingIsNotACall) {
  const std::string v41 = render_turn(ModelVersion::kV41, sample_turn(), ThinkingMode::kThinking);
  const std::string v4_spelled =
      swap_spelling(v41, dsml_tags(ModelVersion::kV41), dsml_tags(ModelVersion::kV4));
  ASSERT_NE(v4_spelled.find("<｜DSML｜tool_calls>"), std::string::npos);
  // Official V4.1 parser: rejects (the DSML marker would be left in the content).
  EXPECT_THROW(parse_completion_strict(v4_spelled, ModelVersion::kV41, ThinkingMode::kThinking),
               di::Error);
  const ParsedCompletion lenient =
      parse_completion(v4_spelled, ModelVersion::kV41, ThinkingMode::kThinking);
  EXPECT_TRUE(lenient.tool_calls.empty());
  // And the other way round.
  const std::string v4 = render_turn(ModelVersion::kV4, sample_turn(), ThinkingMode::kThinking);
  const std::string v41_spelled =
      swap_spelling(v4, dsml_tags(ModelVersion::kV4), dsml_tags(ModelVersion::kV41));
  EXPECT_THROW(parse_completion_strict(v41_spelled, ModelVersion::kV4, ThinkingMode::kThinking),
               di::Error);
  EXPECT_TRUE(
      parse_completion(v41_spelled, ModelVersion::kV4, ThinkingMode::kThinking).tool_calls.empty());
}

TEST(ChatParser, CallsSurviveMissingThinkEnd) {
  const std::string text =
      "thinking about it\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"x\" string=\"false\">[1, 2]</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>";
  EXPECT_THROW(parse_completion_strict(text, ModelVersion::kV41, ThinkingMode::kThinking),
               di::Error);
  const ParsedCompletion got = parse_completion(text, ModelVersion::kV41, ThinkingMode::kThinking);
  EXPECT_TRUE(got.missing_think_end);
  EXPECT_EQ(got.reasoning_content, "thinking about it");
  EXPECT_EQ(got.content, "");
  ASSERT_EQ(got.tool_calls.size(), 1u);
  EXPECT_EQ(got.tool_calls[0].arguments, Json::parse(R"({"x": [1, 2]})"));
  EXPECT_TRUE(got.saw_eos);
}

TEST(ChatParser, LenientCases) {
  // No EOS at all (stopped on the EOS id, not spelled out), truncated calls block, bad JSON.
  const ParsedCompletion plain =
      parse_completion("r</think>answer", ModelVersion::kV41, ThinkingMode::kThinking);
  EXPECT_EQ(plain.reasoning_content, "r");
  EXPECT_EQ(plain.content, "answer");
  EXPECT_FALSE(plain.saw_eos);
  const ParsedCompletion truncated = parse_completion(
      "x\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" "
      "string=\"false\">not json</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke na",
      ModelVersion::kV41, ThinkingMode::kChat);
  EXPECT_EQ(truncated.content, "x");
  ASSERT_EQ(truncated.tool_calls.size(), 1u);
  EXPECT_EQ(truncated.tool_calls[0].arguments, Json::parse(R"({"a": "not json"})"));
  EXPECT_FALSE(truncated.warnings.empty());
  EXPECT_THROW(parse_completion_strict("a<｜end▁of▁sentence｜>tail", ModelVersion::kV41,
                                       ThinkingMode::kChat),
               di::Error);
  EXPECT_THROW(parse_completion_strict("no eos", ModelVersion::kV41, ThinkingMode::kChat),
               di::Error);
}

}  // namespace
}  // namespace di::chat
