#pragma once

// Sampling parameters of one request, with vLLM's field names, semantics and defaults
// (vllm/sampling_params.py), except where a comment says otherwise.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct SamplingParams {
  // Number of output tokens at most (>= 1). vLLM's default is 16; ours is taken from the model's
  // generation_config.json when it has `max_new_tokens` (like vLLM, `max_length`, which counts the
  // prompt too, is not used), else 256.
  int64_t max_tokens = 256;
  int64_t min_tokens = 0;  // EOS and stop_token_ids are suppressed until this many tokens

  double temperature = 1.0;  // >= 0; below kGreedyTemperature = greedy (argmax, ties -> lower id)
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = 0;         // 0 or -1 = all; else exactly the k largest (ties -> lower id)
  double min_p = 0.0;        // [0, 1]

  double presence_penalty = 0.0;    // [-2, 2]
  double frequency_penalty = 0.0;   // [-2, 2]
  double repetition_penalty = 1.0;  // > 0; applied over prompt and output tokens, like vLLM

  // Seed of this request's noise. Without one, the engine derives a seed from its own seed and
  // the request's index, so a run is reproducible as a whole. (JSON: any integer in
  // [-2^63, 2^64); negative seeds are taken modulo 2^64.)
  std::optional<uint64_t> seed;

  std::vector<std::string> stop;        // stop strings (non-empty), removed from the output text
  std::vector<int64_t> stop_token_ids;  // in [0, vocab); also suppressed while min_tokens pending
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;

  // Top-N logprobs per output token, N in [0, 20] (the sampled token always included, so up to
  // N+1 entries); nullopt = none. Logprobs are the log-softmax of the model's raw logits (vLLM v1's
  // default logprobs_mode "raw_logprobs"), before penalties, temperature and filtering.
  std::optional<int64_t> logprobs;
  std::optional<int64_t> prompt_logprobs;

  bool skip_special_tokens = true;

  // vLLM's _SAMPLING_EPS: temperatures below this sample greedily (dividing by them would
  // overflow the logits).
  static constexpr double kGreedyTemperature = 1e-5;
  // The most logprobs / prompt_logprobs a request may ask for (vLLM's default max_logprobs).
  static constexpr int64_t kMaxLogprobs = 20;

  // Throws nothing; returns an empty string when valid, else a message naming the field and the
  // allowed range, e.g. "top_p must be in (0, 1], got 0". Implemented in src/sampling.
  std::string validate(int64_t vocab_size) const;

  bool greedy() const { return temperature < kGreedyTemperature; }
};

}  // namespace deepinfer
