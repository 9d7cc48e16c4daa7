#pragma once

// The logits processors that change the argmax (vLLM v1 Sampler.forward steps 5-6), applied in
// place to one row of fp32 logits with vLLM's float32 formulas so results match bit for bit:
//   min_tokens:  logit = -inf for EOS and stop_token_ids while fewer than min_tokens were emitted
//   repetition:  over tokens in prompt ∪ output, logit *= logit > 0 ? 1/r : r  (1/r in float32)
//   frequency:   logit -= frequency_penalty * (count of the token in the output)
//   presence:    logit -= presence_penalty * (token occurs in the output)

#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace di {

// Reusable buffers of apply_penalties; their contents never influence results.
struct PenaltyScratch {
  std::vector<uint64_t> seen;           // bitset over the vocabulary
  std::vector<int64_t> sorted_outputs;  // output ids, sorted, to count repeats
};

// True when apply_penalties would change anything.
bool has_penalties(const deepinfer::SamplingParams& params);

// True while EOS and stop_token_ids must be suppressed: fewer than min_tokens tokens emitted.
inline bool min_tokens_pending(const deepinfer::SamplingParams& params, size_t num_output_tokens) {
  return static_cast<int64_t>(num_output_tokens) < params.min_tokens;
}

// logits: [vocab] fp32. Sets every id of eos_ids and stop_token_ids to -inf.
void suppress_stop_tokens(std::span<float> logits, std::span<const int64_t> eos_ids,
                          std::span<const int64_t> stop_token_ids);

// logits: [vocab] fp32; prompt_ids/output_ids: token ids in [0, vocab) (checked).
void apply_penalties(std::span<float> logits, const deepinfer::SamplingParams& params,
                     std::span<const int64_t> prompt_ids, std::span<const int64_t> output_ids,
                     PenaltyScratch& scratch);

}  // namespace di
