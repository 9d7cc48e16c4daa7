#pragma once

// vLLM-style progress on stderr: a bar when stderr is a terminal
//   Processed prompts:  37%|███▋      | 370/1000 [00:12<00:20, 30.10it/s, est. speed input:
//   9512.3 toks/s, output: 2210.8 toks/s]
// else one log line every few seconds. Never writes to stdout (results go there).

#include <chrono>
#include <cstdint>

namespace di::cli {

class Progress {
 public:
  Progress(int64_t total, bool enabled);
  ~Progress();
  void update(int64_t done, int64_t input_tokens, int64_t output_tokens);
  void finish();

 private:
  void draw(bool final);
  int64_t total_;
  bool enabled_;
  bool tty_;
  int64_t done_ = 0, input_ = 0, output_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool finished_ = false;
};

}  // namespace di::cli
