#pragma once

// DSpark batch-invariance tests (CPU and GPU): every prompt run twice on one model, as two
// sequences in the same state — prefill, drafter prefill, one greedy decode step — so that one
// copy can be drafted in a batched dspark_steps call and the other alone.

#include <memory>
#include <span>
#include <vector>

#include "model/forward_api.h"
#include "tests_support/logits_compare.h"

namespace di::testing_support {

struct DraftPairs {
  std::vector<std::unique_ptr<SequenceState>> batched, alone;
  std::vector<std::vector<double>> taps;  // per prompt: the decode step's taps
  std::vector<int64_t> inputs;            // per prompt: the decode step's greedy token

  std::vector<DraftRequest> requests() {
    std::vector<DraftRequest> r;
    for (size_t b = 0; b < batched.size(); ++b)
      r.push_back({batched[b].get(), inputs[b], &taps[b]});
    return r;
  }
};

inline DraftPairs make_draft_pairs(ForwardModel& model,
                                   const std::vector<std::vector<int64_t>>& prompts) {
  DraftPairs p;
  for (const auto& prompt : prompts) {
    for (auto* set : {&p.batched, &p.alone}) {
      set->push_back(model.new_sequence());
      SequenceChunk c{set->back().get(), prompt};
      const ForwardResult r = model.forward({&c, 1});
      model.dspark_prefill(*set->back(), r.main_hidden[0]);
      const int64_t next = argmax(r.logits[0]);
      SequenceChunk d{set->back().get(), std::span<const int64_t>(&next, 1)};
      const ForwardResult s = model.forward({&d, 1});
      if (set == &p.batched) {
        p.taps.push_back(s.main_hidden[0].back());
        p.inputs.push_back(argmax(s.logits[0]));
      }
    }
  }
  return p;
}

}  // namespace di::testing_support
