#include "engine/batch_io.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/error.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

TEST(BatchIo, ParsesEveryInputShape) {
  BatchItem p = parse_batch_line(R"({"prompt": "hi", "temperature": 0, "max_tokens": 5})", 1);
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.kind, BatchItem::Kind::kPrompt);
  EXPECT_EQ(p.prompt, "hi");
  EXPECT_EQ(p.custom_id, "line-1");
  EXPECT_EQ(p.sampling["max_tokens"], 5);

  BatchItem t = parse_batch_line(R"({"prompt_token_ids": [1, 2, 3], "custom_id": "x"})", 2);
  EXPECT_EQ(t.error, "");
  EXPECT_EQ(t.kind, BatchItem::Kind::kTokenIds);
  EXPECT_EQ(t.prompt_token_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(t.custom_id, "x");

  BatchItem c = parse_batch_line(
      R"({"messages": [{"role": "user", "content": "q"}], "chat_template_kwargs": {"thinking": false, "reasoning_effort": 30}})",
      3);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.kind, BatchItem::Kind::kChat);
  EXPECT_EQ(c.thinking, false);
  EXPECT_EQ(c.reasoning_effort, "30");

  BatchItem e = parse_batch_line(
      R"({"custom_id": "req-7", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_completion_tokens": 9, "sampling_params": {"top_k": 4}}})",
      4);
  EXPECT_EQ(e.error, "");
  EXPECT_EQ(e.custom_id, "req-7");
  EXPECT_EQ(e.kind, BatchItem::Kind::kChat);
  EXPECT_EQ(e.sampling["max_completion_tokens"], 9);
  EXPECT_EQ(e.sampling["top_k"], 4);
  EXPECT_FALSE(e.sampling.contains("model"));
}

TEST(BatchIo, BadLinesGetErrorsNamingTheField) {
  auto err = [](const std::string& line) { return parse_batch_line(line, 9).error; };
  EXPECT_NE(err("{not json").find("line 9: malformed JSON"), std::string::npos);
  EXPECT_NE(err("[1,2]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"temperature": 0})").find("exactly one of"), std::string::npos);
  EXPECT_NE(err(R"({"prompt": "a", "messages": []})").find("exactly one of"), std::string::npos);
  EXPECT_NE(err(R"({"prompt": 5})").find("\"prompt\" must be a string"), std::string::npos);
  EXPECT_NE(err(R"({"prompt_token_ids": [1, "x"]})").find("token id [1]"), std::string::npos);
  EXPECT_NE(err(R"({"messages": "hi"})").find("\"messages\""), std::string::npos);
  EXPECT_NE(err(R"({"url": "/v1/embeddings", "body": {"prompt": "a"}})").find("/v1/embeddings"),
            std::string::npos);
  EXPECT_NE(err(R"({"custom_id": 5, "prompt": "a"})").find("custom_id"), std::string::npos);
  EXPECT_NE(err(R"({"prompt": "a", "n": 2})").find("n = 1"), std::string::npos);
  EXPECT_NE(err(R"({"messages": [{"role":"user","content":"x"}], "thinking": "yes"})")
                .find("\"thinking\""),
            std::string::npos);
}

TEST(BatchIo, ReadFileFlagsDuplicateIdsAndSkipsBlankLines) {
  testing::TempDir dir;
  const auto path = dir.path() / "in.jsonl";
  std::ofstream(path) << R"({"custom_id": "a", "prompt": "x"})"
                      << "\n\n"
                      << R"({"custom_id": "a", "prompt": "y"})"
                      << "\n"
                      << "garbage\n";
  const std::vector<BatchItem> items = read_batch_file(path);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].error, "");
  EXPECT_NE(items[1].error.find("duplicate custom_id 'a'"), std::string::npos);
  EXPECT_EQ(items[1].line_number, 3);
  EXPECT_NE(items[2].error.find("line 4"), std::string::npos);
  EXPECT_THROW(read_batch_file(dir.path() / "missing.jsonl"), Error);
}

TEST(BatchIo, WriterResumesAndCutsATornLine) {
  testing::TempDir dir;
  const auto path = dir.path() / "out.jsonl";
  {
    BatchOutputWriter w(path);
    w.write(nlohmann::ordered_json{{"custom_id", "a"}, {"text", "1"}});
    w.write(nlohmann::ordered_json{{"custom_id", "b"}, {"text", "2"}});
  }
  {
    std::ofstream(path, std::ios::app) << R"({"custom_id": "c", "te)";  // killed mid-write
  }
  BatchOutputWriter w(path);
  EXPECT_TRUE(w.done("a"));
  EXPECT_TRUE(w.done("b"));
  EXPECT_FALSE(w.done("c"));
  EXPECT_EQ(w.num_done(), 2u);
  w.write(nlohmann::ordered_json{{"custom_id", "c"}, {"text", "3"}});
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
    ++n;
  }
  EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace di
