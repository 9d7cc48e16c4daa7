#pragma once

// The sampler of one row: a pure function of (raw logits, params, seed, position, token history),
// so a request's token never depends on the batch it was computed in, on the order of rows, or
// on earlier calls (docs/design/sampling.md). The engine calls it once per row; the CUDA sampler
// (later issue) must reproduce it.
//
// Steps, in vLLM v1's order (vllm/v1/sample/sampler.py):
//   1. logprobs of the raw logits, when requested (logprobs.h)
//   2. min_tokens: -inf on EOS and stop_token_ids while suppress_stop_tokens
//   3. repetition, frequency and presence penalties (penalties.h)
//   4. greedy (temperature < 1e-5): argmax, ties -> lower id; done
//   5. temperature: z = logit / T in float32
//   6. min_p: drop tokens with p < min_p * p_max, i.e. z - z_max < log(min_p)
//   7. top_k: keep exactly the k largest z (ties -> lower id)
//   8. top_p: keep the smallest prefix of the (z desc, id asc) order whose mass reaches top_p
//   9. exponential race, as the DeepSeek reference sampler (`probs.div_(exponential_(1))
//      .argmax()`): token = argmax_i p_i / E_i with E_i = -log(u_i) and u_i the Philox noise of
//      (seed, NoiseStream::kSample, position, i); ties -> lower id.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"

namespace di {

struct SamplerRow {
  std::span<const float> logits;        // [vocab] raw fp32 logits of this row
  uint64_t seed = 0;                    // the request's seed (params.seed or engine-derived)
  int64_t position = 0;                 // absolute position of the token being sampled (>= 0)
  std::span<const int64_t> prompt_ids;  // for the repetition penalty
  std::span<const int64_t> output_ids;  // tokens emitted so far (penalties)
  std::span<const int64_t> eos_ids;     // suppressed with stop_token_ids while min_tokens pending
  bool suppress_stop_tokens = false;    // = min_tokens_pending(params, output_ids.size())
};

struct SampleResult {
  int64_t token_id = -1;
  std::optional<RowLogprobs> logprobs;  // when params.logprobs is set: top-N plus this token
};

// A row's result, or the error sample_row threw for it (a backend that samples on the device
// reports errors per row: the request fails, not the batch).
struct SampleOutcome {
  SampleResult result;
  std::string error;  // non-empty: failed (result.token_id = -1)
};

// Work buffers reused across calls (one per thread). They hold no state that outlives a call:
// results are identical with a fresh scratch.
struct SamplerScratch {
  std::vector<float> values;          // [vocab] processed logits, then z
  std::vector<int64_t> bucket_count;  // top_k / top_p histogram
  std::vector<double> bucket_mass;
  std::vector<int32_t> candidates;  // token ids of one histogram bucket
  std::vector<int32_t> tail;        // the part of the top_k boundary bucket top_k keeps
  PenaltyScratch penalties;
};

SampleResult sample_row(const deepinfer::SamplingParams& params, const SamplerRow& row,
                        SamplerScratch& scratch);
SampleResult sample_row(const deepinfer::SamplingParams& params, const SamplerRow& row);

// argmax with ties -> lower id, ignoring NaN; -1 when every value is NaN.
int64_t argmax_lowest_id(std::span<const float> values);

}  // namespace di
