#pragma once

// Logprobs of one row: log-softmax of the model's RAW logits (vLLM v1 logprobs_mode
// "raw_logprobs": before min_tokens, penalties, temperature and filtering). Used for sampled
// tokens and, with the prompt's next token as `token_id`, for prompt_logprobs.

#include <cstdint>
#include <span>
#include <vector>

namespace di {

struct TokenLogprob {
  int64_t token_id = -1;
  double logprob = 0;  // log-softmax, computed in double
  int64_t rank = 0;    // 1 = most likely
};

struct RowLogprobs {
  TokenLogprob token;             // the sampled (or prompt) token
  std::vector<TokenLogprob> top;  // the top_n most likely, rank 1..top_n
};

// Ranks follow one total order: larger logit first, equal logits by lower id (vLLM counts
// tokens with logprob >= the token's, which only differs on exact ties). The sampled token's rank
// is its position in that order, so it agrees with `top` whenever it appears there.
// logits: [vocab] fp32, finite or -inf (checked: NaN or +inf throws di::Error).
// token_id in [0, vocab); top_n in [0, vocab].
RowLogprobs compute_row_logprobs(std::span<const float> logits, int64_t token_id, int64_t top_n);

}  // namespace di
