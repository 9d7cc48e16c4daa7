#pragma once

// Weight-byte rooflines of the forward benchmarks (cuda_forward_bench): the bytes a decode step or
// a DSpark drafting step must read at least, from the checkpoint's weight catalogue. Host code
// only, tested without a GPU (tests/unit/bench/roofline_test.cc).

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "model/layer_plan.h"

namespace di::bench {

// Expected distinct experts B tokens pick, each k of E uniformly at random.
double expected_experts(int64_t E, int64_t k, int64_t batch);

// The bytes of the routed experts `tokens` rows of a block read, of all its experts' bytes.
double expected_routed_bytes(const LayerPlan& p, double all_expert_bytes, int64_t tokens);

// Weight bytes block b reads in a decode step of `batch` tokens: every tensor of the block except
// the routed experts (the expected distinct ones) and the host-resident Engram table (its staged
// rows instead). `experts_out` (optional): the routed-expert part alone.
std::vector<double> weight_bytes_per_block(const ModelConfig& cfg,
                                           const std::vector<LayerPlan>& plan, int64_t batch,
                                           std::vector<double>* experts_out = nullptr);

// Weight bytes one DSpark drafting step of `batch` sequences reads at least (the floor of
// dspark_steps): every draft stage's dense weights and the routed experts its block rows touch
// (expected distinct experts of the rows), the shared LM head for the rows' logits, and the
// Markov head once per row position (all sequences' rows of a position share one pass).
double dspark_step_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan, int64_t batch);

}  // namespace di::bench
