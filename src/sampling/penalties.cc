#include "sampling/penalties.h"

#include <algorithm>
#include <limits>

#include "common/check.h"

namespace di {
namespace {

size_t checked_id(int64_t id, size_t vocab, const char* what) {
  DI_CHECK(id >= 0 && static_cast<uint64_t>(id) < vocab, "{} id {} out of range [0, {})", what, id,
           vocab);
  return static_cast<size_t>(id);
}

}  // namespace

bool has_penalties(const deepinfer::SamplingParams& params) {
  return params.repetition_penalty != 1.0 || params.frequency_penalty != 0.0 ||
         params.presence_penalty != 0.0;
}

void suppress_stop_tokens(std::span<float> logits, std::span<const int64_t> eos_ids,
                          std::span<const int64_t> stop_token_ids) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (const int64_t id : eos_ids)
    logits[checked_id(id, logits.size(), "EOS")] = kNegInf;
  for (const int64_t id : stop_token_ids) {
    logits[checked_id(id, logits.size(), "stop token")] = kNegInf;
  }
}

void apply_penalties(std::span<float> logits, const deepinfer::SamplingParams& params,
                     std::span<const int64_t> prompt_ids, std::span<const int64_t> output_ids,
                     PenaltyScratch& scratch) {
  const size_t vocab = logits.size();
  // vLLM holds the penalties as float32 tensors.
  const auto rep = static_cast<float>(params.repetition_penalty);
  const auto freq = static_cast<float>(params.frequency_penalty);
  const auto presence = static_cast<float>(params.presence_penalty);

  if (rep != 1.0f) {
    // Each distinct token of prompt ∪ output is penalised once.
    // vLLM multiplies by the float32 reciprocal (logits *= where(logits > 0, 1 / r, r)).
    const float inv_rep = 1.0f / rep;
    scratch.seen.assign((vocab + 63) / 64, 0);
    auto penalise_once = [&](int64_t raw_id, const char* what) {
      const size_t id = checked_id(raw_id, vocab, what);
      const uint64_t bit = uint64_t{1} << (id % 64);
      if (scratch.seen[id / 64] & bit) return;
      scratch.seen[id / 64] |= bit;
      float& l = logits[id];
      l *= l > 0.0f ? inv_rep : rep;
    };
    for (const int64_t id : prompt_ids)
      penalise_once(id, "prompt token");
    for (const int64_t id : output_ids)
      penalise_once(id, "output token");
  }

  if (freq != 0.0f || presence != 0.0f) {
    std::vector<int64_t>& ids = scratch.sorted_outputs;
    ids.assign(output_ids.begin(), output_ids.end());
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i])
        ++j;
      float& l = logits[checked_id(ids[i], vocab, "output token")];
      // Two float32 subtractions in vLLM's order (frequency, then presence).
      l -= freq * static_cast<float>(j - i);
      l -= presence;
      i = j;
    }
  }
}

}  // namespace di
