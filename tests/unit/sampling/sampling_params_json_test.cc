#include "sampling/sampling_params_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

using deepinfer::SamplingParams;
using nlohmann::json;

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected di::Error";
  return {};
}

SamplingParams parse(const std::string& text, const SamplingParams& defaults = {}) {
  return sampling_params_from_json(json::parse(text), defaults);
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse(text); });
}

TEST(SamplingParamsJson, ReadsEveryField) {
  const SamplingParams p = parse(R"({
    "max_tokens": 100, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "seed": 1234, "stop": ["\n\n", "END"], "stop_token_ids": [1, 2], "ignore_eos": true,
    "min_tokens": 3, "logprobs": 5, "prompt_logprobs": 2, "skip_special_tokens": false,
    "include_stop_str_in_output": true, "model": "ignored", "messages": [], "n": 1})");
  EXPECT_EQ(p.max_tokens, 100);
  EXPECT_EQ(p.temperature, 0.7);
  EXPECT_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.min_p, 0.05);
  EXPECT_EQ(p.presence_penalty, 0.5);
  EXPECT_EQ(p.frequency_penalty, -0.5);
  EXPECT_EQ(p.repetition_penalty, 1.1);
  EXPECT_EQ(p.seed, 1234u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_EQ(p.prompt_logprobs, 2);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_TRUE(p.include_stop_str_in_output);
}

TEST(SamplingParamsJson, AbsentAndNullKeysKeepDefaults) {
  SamplingParams defaults;
  defaults.temperature = 0.6;
  defaults.top_p = 0.95;
  defaults.max_tokens = 4096;
  const SamplingParams p = parse(R"({"top_p": null, "stop": null, "seed": null})", defaults);
  EXPECT_EQ(p.temperature, 0.6);
  EXPECT_EQ(p.top_p, 0.95);
  EXPECT_EQ(p.max_tokens, 4096);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_TRUE(p.stop.empty());
}

TEST(SamplingParamsJson, AliasesAndShapes) {
  EXPECT_EQ(parse(R"({"max_completion_tokens": 7})").max_tokens, 7);
  EXPECT_EQ(parse(R"({"max_tokens": 9, "max_completion_tokens": 7})").max_tokens, 7);
  EXPECT_EQ(parse(R"({"max_tokens": 12.0})").max_tokens, 12);  // integral float
  EXPECT_EQ(parse(R"({"stop": "###"})").stop, std::vector<std::string>{"###"});
  EXPECT_EQ(parse(R"({"temperature": 1})").temperature, 1.0);  // integer for a number
  EXPECT_EQ(parse(R"({"seed": -1})").seed, 0xffffffffffffffffull);
  EXPECT_EQ(parse(R"({"seed": 18446744073709551615})").seed, 0xffffffffffffffffull);
}

TEST(SamplingParamsJson, ChatStyleLogprobs) {
  EXPECT_EQ(parse(R"({"logprobs": true, "top_logprobs": 3})").logprobs, 3);
  EXPECT_EQ(parse(R"({"logprobs": true})").logprobs, 0);
  EXPECT_FALSE(parse(R"({"logprobs": false})").logprobs.has_value());
  SamplingParams defaults;
  defaults.logprobs = 4;
  EXPECT_FALSE(parse(R"({"logprobs": false})", defaults).logprobs.has_value());
  EXPECT_FALSE(parse(R"({"logprobs": null})").logprobs.has_value());
  EXPECT_EQ(parse_error(R"({"top_logprobs": 3})")
                .find("request field `top_logprobs` needs `logprobs` set to true"),
            0u);
  EXPECT_EQ(parse_error(R"({"logprobs": false, "top_logprobs": 3})")
                .find("request field `top_logprobs` needs `logprobs` set to true"),
            0u);
}

TEST(SamplingParamsJson, WrongTypesNameTheKey) {
  struct Case {
    const char* body;
    const char* message;
  };
  const Case cases[] = {
      {R"({"temperature": "0.5"})", "request field `temperature` must be a number, got string"},
      {R"({"top_p": true})", "request field `top_p` must be a number, got boolean"},
      {R"({"max_tokens": 1.5})", "request field `max_tokens` must be an integer, got 1.5"},
      {R"({"max_completion_tokens": "5"})",
       "request field `max_completion_tokens` must be an integer, got string"},
      {R"({"top_k": [1]})", "request field `top_k` must be an integer, got array"},
      {R"({"max_tokens": 9223372036854775808})",
       "request field `max_tokens` must be an integer in the int64 range, got "
       "9223372036854775808"},
      {R"({"seed": "x"})", "request field `seed` must be an integer, got string"},
      {R"({"seed": 0.5})", "request field `seed` must be an integer, got 0.5"},
      {R"({"stop": 5})", "request field `stop` must be a string or a list of strings, got 5"},
      {R"({"stop": ["a", 1]})", "request field `stop[1]` must be a string, got 1"},
      {R"({"stop_token_ids": 1})",
       "request field `stop_token_ids` must be a list of integers, got 1"},
      {R"({"stop_token_ids": [1, "2"]})",
       "request field `stop_token_ids[1]` must be an integer, got string"},
      {R"({"ignore_eos": 1})", "request field `ignore_eos` must be a boolean, got 1"},
      {R"({"skip_special_tokens": "no"})",
       "request field `skip_special_tokens` must be a boolean, got string"},
      {R"({"include_stop_str_in_output": 0})",
       "request field `include_stop_str_in_output` must be a boolean, got 0"},
      {R"({"logprobs": "5"})",
       "request field `logprobs` must be an integer or a boolean, got string"},
      {R"({"logprobs": true, "top_logprobs": 2.5})",
       "request field `top_logprobs` must be an integer, got 2.5"},
      {R"({"prompt_logprobs": {}})",
       "request field `prompt_logprobs` must be an integer, got object"},
      {R"({"min_tokens": null, "min_p": "0"})",
       "request field `min_p` must be a number, got string"},
      {R"({"presence_penalty": []})",
       "request field `presence_penalty` must be a number, got array"},
      {R"({"frequency_penalty": "1"})",
       "request field `frequency_penalty` must be a number, got string"},
      {R"({"repetition_penalty": false})",
       "request field `repetition_penalty` must be a number, got boolean"},
      {R"([1, 2])", "request body must be a JSON object, got array"},
  };
  for (const Case& c : cases) {
    const std::string err = parse_error(c.body);
    EXPECT_EQ(err.find(c.message), 0u) << c.body << " -> " << err;
  }
}

TEST(SamplingParamsJson, NonThrowingFormReturnsInvalidArgument) {
  const Result<SamplingParams> bad =
      try_sampling_params_from_json(json::parse(R"({"top_p": "x"})"), {});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("`top_p`"), std::string::npos);
  const Result<SamplingParams> good =
      try_sampling_params_from_json(json::parse(R"({"top_p": 0.5})"), {});
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(good.value().top_p, 0.5);
}

TEST(GenerationConfig, MissingFileGivesLibraryDefaults) {
  const testing::TempDir dir;
  const SamplingParams p = defaults_from_generation_config(dir.path());
  const SamplingParams lib;
  EXPECT_EQ(p.temperature, lib.temperature);
  EXPECT_EQ(p.top_p, lib.top_p);
  EXPECT_EQ(p.max_tokens, lib.max_tokens);
}

TEST(GenerationConfig, ReadsVllmKeysAndIgnoresTheRest) {
  const testing::TempDir dir;
  testing::write_file(dir / "generation_config.json", R"({
    "_from_model_config": true, "bos_token_id": 0, "eos_token_id": 1, "do_sample": true,
    "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.01, "repetition_penalty": 1.05,
    "max_new_tokens": 8192, "max_length": 100, "transformers_version": "4.46.3"})");
  const SamplingParams p = defaults_from_generation_config(dir.path());
  EXPECT_EQ(p.temperature, 0.6);
  EXPECT_EQ(p.top_p, 0.95);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.min_p, 0.01);
  EXPECT_EQ(p.repetition_penalty, 1.05);
  EXPECT_EQ(p.max_tokens, 8192);
  // And a request body overrides them.
  const SamplingParams r = sampling_params_from_json(json::parse(R"({"temperature": 0})"), p);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.top_p, 0.95);
}

TEST(GenerationConfig, MalformedFilesNameTheFile) {
  const testing::TempDir dir;
  const std::string file = (dir / "generation_config.json").string();
  auto error_for = [&](const std::string& text) {
    testing::write_file(dir / "generation_config.json", text);
    return error_of([&] { defaults_from_generation_config(dir.path()); });
  };
  EXPECT_EQ(error_for("{\"temperature\": 0.6,").find(file + ": invalid JSON"), 0u);
  EXPECT_EQ(error_for("[]").find(file + ": must hold a JSON object, got array"), 0u);
  EXPECT_EQ(error_for(R"({"temperature": "hot"})")
                .find(file + ": `temperature` must be a number, got string"),
            0u);
  EXPECT_EQ(error_for(R"({"max_new_tokens": 1.5})")
                .find(file + ": `max_new_tokens` must be an integer, got 1.5"),
            0u);
  EXPECT_EQ(error_for(R"({"top_p": 0})").find(file + ": top_p must be in (0, 1], got 0"), 0u);
}

}  // namespace
}  // namespace di
