// SamplingParams::validate: vLLM's ranges (vllm/sampling_params.py _verify_args), one message per
// field naming the field, the allowed range and the value received.

#include "deepinfer/sampling_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace deepinfer {

std::string SamplingParams::validate(int64_t vocab_size) const {
  if (vocab_size <= 0) return fmt::format("vocab_size must be positive, got {}", vocab_size);

  // Every comparison is written so that NaN fails it.
  if (!(std::isfinite(temperature) && temperature >= 0.0)) {
    return fmt::format("temperature must be >= 0 and finite, got {}", temperature);
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) return fmt::format("top_p must be in (0, 1], got {}", top_p);
  if (top_k < -1) {
    return fmt::format("top_k must be -1 or 0 (disabled) or at least 1, got {}", top_k);
  }
  if (!(min_p >= 0.0 && min_p <= 1.0)) return fmt::format("min_p must be in [0, 1], got {}", min_p);
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0)) {
    return fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0)) {
    return fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0)) {
    return fmt::format("repetition_penalty must be > 0 and finite, got {}", repetition_penalty);
  }
  if (max_tokens < 1) return fmt::format("max_tokens must be at least 1, got {}", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return fmt::format("min_tokens must be in [0, max_tokens = {}], got {}", max_tokens,
                       min_tokens);
  }

  const int64_t max_logprobs = std::min(kMaxLogprobs, vocab_size);
  if (logprobs && (*logprobs < 0 || *logprobs > max_logprobs)) {
    return fmt::format("logprobs must be in [0, {}], got {}", max_logprobs, *logprobs);
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > max_logprobs)) {
    return fmt::format("prompt_logprobs must be in [0, {}], got {}", max_logprobs,
                       *prompt_logprobs);
  }

  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    const int64_t id = stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return fmt::format("stop_token_ids[{}] must be in [0, vocab size {}), got {}", i, vocab_size,
                         id);
    }
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return fmt::format("stop[{}] must be a non-empty string", i);
  }
  return {};
}

}  // namespace deepinfer
