// `deepinfer generate` end to end on a synthetic tiny V4.1 model with the bundled tokenizer:
// every JSONL input shape, per-request errors that leave the others running, and resuming a
// killed run from its output file.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests_support/cli_runner.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

using CliRun = testing::RunResult;

CliRun cli(const std::string& args, const fs::path& dir) {
  return testing::run_cli(DI_CLI_PATH, args, dir);
}

std::string fmt_id(int i) {
  std::string id = "r";
  id.append(std::to_string(i));
  return id;
}

std::vector<json> lines_of(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir("deepinfer-generate");
    const CliRun r = cli("synth --config v41-tiny --seed 0 --out " + (tmp_->path() / "m").string(),
                         tmp_->path());
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static std::string base() {
    return "generate --model " + (tmp_->path() / "m").string() + " --cache-dir " +
           (tmp_->path() / "cache").string() + " --no-progress ";
  }
  static TempDir* tmp_;
};
TempDir* GenerateCli::tmp_ = nullptr;

const char* kBatch[] = {
    R"({"custom_id": "text", "prompt": "Hello there", "max_tokens": 3, "temperature": 0})",
    R"({"custom_id": "ids", "prompt_token_ids": [100, 200, 300], "max_tokens": 2, "seed": 5})",
    R"({"custom_id": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})",
    R"({"custom_id": "batch-api", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "x", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}], "max_completion_tokens": 2, "chat_template_kwargs": {"thinking": false}}})",
    R"({"custom_id": "broken", "prompt": )",
    R"({"custom_id": "role", "messages": [{"role": "wizard", "content": "hi"}]})",
    R"({"custom_id": "param", "prompt": "x", "top_p": 5})",
    R"({"custom_id": "type", "prompt": "x", "temperature": "hot"})",
    R"({"custom_id": "long", "prompt_token_ids": [5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5], "max_tokens": 2})",
    R"({"custom_id": "tools", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"parameters": {}}}]})",
    R"({"custom_id": "vocab", "prompt_token_ids": [999999]})",
};

TEST_F(GenerateCli, JsonlBatchWithBadLinesKeepsTheGoodOnes) {
  std::string input;
  for (const char* l : kBatch)
    input += std::string(l) + "\n";
  write_file(tmp_->path() / "in.jsonl", input);
  const fs::path out = tmp_->path() / "out.jsonl";
  fs::remove(out);
  const CliRun r = cli(base() + "--max-model-len 64 --input " +
                           (tmp_->path() / "in.jsonl").string() + " --output " + out.string(),
                       tmp_->path());
  EXPECT_EQ(r.code, 1) << r.err;  // some requests failed; the run itself completed
  std::map<std::string, json> by_id;
  for (const json& j : lines_of(read_file(out)))
    by_id[j["custom_id"]] = j;
  ASSERT_EQ(by_id.size(), std::size(kBatch)) << read_file(out);
  for (const char* ok : {"text", "ids", "chat", "batch-api"}) {
    const json& j = by_id.at(ok);
    ASSERT_FALSE(j.contains("error")) << j.dump();
    EXPECT_FALSE(j["token_ids"].empty()) << ok;
    EXPECT_EQ(j["usage"]["completion_tokens"], j["token_ids"].size());
    EXPECT_TRUE(j["finish_reason"] == "length" || j["finish_reason"] == "stop");
  }
  EXPECT_EQ(by_id["text"]["token_ids"].size(), 3u);
  EXPECT_EQ(by_id["ids"]["usage"]["prompt_tokens"], 3);
  EXPECT_TRUE(by_id["chat"].contains("reasoning_content"));  // thinking mode by default
  EXPECT_TRUE(by_id["batch-api"].contains("content"));
  auto error_of = [&](const std::string& id) {
    return by_id.at(id).value("/error/message"_json_pointer, std::string());
  };
  EXPECT_NE(error_of("line-5").find("line 5: malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("role").find("wizard"), std::string::npos) << error_of("role");
  EXPECT_NE(error_of("param").find("top_p"), std::string::npos) << error_of("param");
  EXPECT_NE(error_of("type").find("temperature"), std::string::npos) << error_of("type");
  // Scheduler rejections name the request by its custom_id.
  EXPECT_EQ(error_of("long"), "request long: prompt of 70 tokens is longer than max_model_len 64");
  EXPECT_NE(error_of("tools").find("tools"), std::string::npos) << error_of("tools");
  EXPECT_NE(error_of("vocab").find("vocabulary"), std::string::npos) << error_of("vocab");
  // Greedy is deterministic across runs: the same text request again gives the same ids.
  write_file(tmp_->path() / "one.jsonl", std::string(kBatch[0]).append("\n"));
  const CliRun again =
      cli(base() + "--input " + (tmp_->path() / "one.jsonl").string(), tmp_->path());
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(lines_of(again.out).at(0)["token_ids"], by_id["text"]["token_ids"]);
}

TEST_F(GenerateCli, ResumesAfterATornOutputLine) {
  std::string input;
  for (int i = 0; i < 6; ++i) {
    input += json{{"custom_id", fmt_id(i)},
                  {"prompt_token_ids", {10 + i, 20 + i}},
                  {"max_tokens", 2},
                  {"temperature", 0}}
                 .dump() +
             "\n";
  }
  write_file(tmp_->path() / "resume.jsonl", input);
  const fs::path out = tmp_->path() / "resume-out.jsonl";
  fs::remove(out);
  const std::string cmd =
      base() + "--input " + (tmp_->path() / "resume.jsonl").string() + " --output " + out.string();
  CliRun r = cli(cmd, tmp_->path());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string full = read_file(out);
  const auto complete = lines_of(full);
  ASSERT_EQ(complete.size(), 6u);
  // Simulate a kill in the middle of writing the 4th line.
  const size_t cut = full.find('\n', full.find('\n', full.find('\n') + 1) + 1) + 15;
  write_file(out, full.substr(0, cut));
  r = cli(cmd, tmp_->path());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("3 requests already done"), std::string::npos) << r.err;
  std::map<std::string, int> seen;
  std::map<std::string, json> got;
  for (const json& j : lines_of(read_file(out))) {
    ++seen[j["custom_id"]];
    got[j["custom_id"]] = j;
  }
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& [id, n] : seen)
    EXPECT_EQ(n, 1) << id;
  for (const json& j : complete)
    EXPECT_EQ(got[j["custom_id"]]["token_ids"], j["token_ids"]);
}

TEST_F(GenerateCli, PromptFlagPrintsTextAndUsageErrorsExitTwo) {
  const CliRun r = cli(base() + "--prompt 'Hello' --max-tokens 3 --temperature 0", tmp_->path());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_EQ(cli(base(), tmp_->path()).code, 2);  // neither --prompt nor --input
  EXPECT_EQ(cli(base() + "--prompt x --kv-cache-memory 12XB", tmp_->path()).code, 2);
  const CliRun bad = cli(base() + "--prompt x --top-p 0", tmp_->path());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("top_p"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace di
