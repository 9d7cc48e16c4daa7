#pragma once

// Results of a request, with vLLM's names (vllm/outputs.py): RequestOutput holds one
// CompletionOutput per sample (n = 1 for now).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct Logprob {
  double logprob = 0;
  int64_t rank = 0;  // 1 = most likely
  std::string decoded_token;
};

// token id -> logprob entry, for one position.
using PositionLogprobs = std::map<int64_t, Logprob>;

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct CompletionOutput {
  int64_t index = 0;
  std::string text;
  std::vector<int64_t> token_ids;
  double cumulative_logprob = 0;  // of the sampled tokens; only when logprobs were requested
  std::vector<PositionLogprobs> logprobs;  // per output token, when requested
  std::string finish_reason;               // "stop", "length", "abort", "error"; "" = running
  // The stop string or stop token id that ended the request ("" when EOS or length).
  std::string stop_reason;
  // Chat requests: the text split into reasoning and content, and parsed tool calls.
  std::optional<std::string> reasoning_content;
  std::optional<std::string> content;
  std::vector<ToolCall> tool_calls;
};

struct RequestMetrics {
  double arrival_time = 0;  // seconds since the engine started
  double first_scheduled_time = 0;
  double first_token_time = 0;
  double finished_time = 0;
  double time_in_queue = 0;  // first_scheduled - arrival
  double ttft = 0;           // first_token - arrival
  double tpot = 0;           // (finished - first_token) / (output tokens - 1)
  int64_t num_preemptions = 0;
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;  // empty for token-id prompts
  std::vector<int64_t> prompt_token_ids;
  std::vector<std::optional<PositionLogprobs>> prompt_logprobs;  // first position: nullopt
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  RequestMetrics metrics;
  // Empty when the request ran; otherwise why it was rejected or failed (the request's own
  // problem: invalid parameter, prompt too long, ...). Other requests are unaffected.
  std::string error;
};

}  // namespace deepinfer
