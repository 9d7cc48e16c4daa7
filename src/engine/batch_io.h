#pragma once

// Offline JSONL batches (`deepinfer generate --input FILE.jsonl --output FILE.jsonl`).
//
// Input, one JSON object per line, any of:
//   {"prompt": "text", ...sampling fields}
//   {"prompt_token_ids": [1, 2, 3], ...}
//   {"messages": [{"role": "user", "content": "hi"}], "tools": [...], ...}
//   {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions",
//    "body": {...one of the above, OpenAI request body...}}            (OpenAI Batch envelope)
// Sampling fields sit beside the prompt (vLLM/OpenAI names) or in "sampling_params": {...};
// chat options in "chat_template_kwargs": {"thinking": bool, "reasoning_effort": ...} or as
// top-level "thinking" / "reasoning_effort".
//
// Output: one line per request, written as soon as it finishes, keyed by custom_id (or
// "line-N", N = 1-based input line number). A bad line gives an error line; the rest go on.
// Rerunning with the same output file skips requests already written there (resumable); a
// torn last line from a killed run is cut off first.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace di {

struct BatchItem {
  std::string custom_id;  // from the line, else "line-N"
  int64_t line_number = 0;
  enum class Kind { kPrompt, kTokenIds, kChat } kind = Kind::kPrompt;
  std::string prompt;
  std::vector<int64_t> prompt_token_ids;
  nlohmann::ordered_json messages;  // kChat: the messages array as given
  nlohmann::ordered_json tools;     // kChat: OpenAI tools array (null when absent)
  nlohmann::ordered_json sampling;  // object of sampling fields (may be empty)
  std::optional<bool> thinking;
  std::optional<std::string> reasoning_effort;
  std::string error;  // non-empty: this line is bad; report it and go on
};

// Parses one input line. Never throws: problems land in `error`, naming the field.
BatchItem parse_batch_line(const std::string& line, int64_t line_number);

// Reads every line of `path` (blank lines skipped). Throws di::Error if the file can't be read.
std::vector<BatchItem> read_batch_file(const std::filesystem::path& path);

// Appends result lines; each line is written whole and flushed, so a kill leaves at most one
// torn line at the end, which `open` removes.
class BatchOutputWriter {
 public:
  // Opens (creating if needed) `path`; scans existing complete lines and records their
  // custom_ids as done; truncates a torn trailing line. Throws di::Error naming the file.
  explicit BatchOutputWriter(const std::filesystem::path& path);
  ~BatchOutputWriter();
  BatchOutputWriter(const BatchOutputWriter&) = delete;
  BatchOutputWriter& operator=(const BatchOutputWriter&) = delete;

  bool done(const std::string& custom_id) const { return done_.count(custom_id) != 0; }
  size_t num_done() const { return done_.size(); }
  void write(const nlohmann::ordered_json& line);

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::set<std::string> done_;
};

}  // namespace di
