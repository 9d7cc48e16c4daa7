// The forward benchmarks' weight-byte rooflines (bench/roofline.h) on the V4.1-Flash preset: the
// expected distinct experts, and the decode-step and DSpark-step floors checked against sums
// over the weight catalogue taken here, tensor by tensor.
#include "roofline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/synth.h"
#include "model/weight_catalogue.h"

namespace di::bench {
namespace {

struct Preset {
  ModelConfig cfg;
  std::vector<LayerPlan> plan;
};

Preset v41_flash() {
  Preset p;
  p.cfg = parse_model_config(preset_config_json("v41-flash").dump(), "v41-flash preset");
  p.plan = build_layer_plan(p.cfg);
  return p;
}

TEST(Roofline, ExpectedExpertsOfUniformTopK) {
  EXPECT_DOUBLE_EQ(expected_experts(384, 6, 0), 0.0);
  EXPECT_NEAR(expected_experts(384, 6, 1), 6.0, 1e-12);
  // Two tokens: 2k minus the expected overlap k^2 / E.
  EXPECT_NEAR(expected_experts(384, 6, 2), 12.0 - 36.0 / 384.0, 1e-12);
  double last = 0.0;
  for (const int64_t b : {1, 2, 7, 64, 256, 4096}) {
    const double e = expected_experts(384, 6, b);
    EXPECT_GT(e, last) << b;
    EXPECT_LE(e, 384.0) << b;
    last = e;
  }
  EXPECT_NEAR(expected_experts(384, 6, 100000), 384.0, 1e-9);
}

// Per block: the dense bytes (all but the routed experts and the host Engram table) plus the
// expected experts' share of the routed bytes plus the staged Engram rows.
TEST(Roofline, DecodeFloorIsTheCatalogueWithExpectedExperts) {
  const Preset p = v41_flash();
  const WeightCatalogue cat(p.cfg, p.plan);
  const auto L = static_cast<size_t>(p.cfg.num_layers);
  std::vector<double> dense(L, 0.0), routed(L, 0.0);
  for (const WeightSpec& w : cat.entries()) {
    if (w.block < 0 || w.block >= p.cfg.num_layers) continue;
    const auto b = static_cast<size_t>(w.block);
    if (w.group == WeightGroup::kRoutedExperts) {
      routed[b] += static_cast<double>(w.nbytes());
    } else if (w.name.find("engram.embed.") == std::string::npos) {
      dense[b] += static_cast<double>(w.nbytes());
    }
  }
  for (const int64_t batch : {1, 64}) {
    std::vector<double> experts;
    const std::vector<double> got = weight_bytes_per_block(p.cfg, p.plan, batch, &experts);
    ASSERT_EQ(got.size(), L);
    int engram_blocks = 0;
    for (size_t b = 0; b < L; ++b) {
      const LayerPlan& lp = p.plan[b];
      const double want_experts =
          routed[b] * expected_experts(lp.n_routed_experts, lp.num_experts_per_tok, batch) /
          static_cast<double>(lp.n_routed_experts);
      EXPECT_NEAR(experts[b], want_experts, 1e-6 * want_experts) << "block " << b;
      double engram = 0.0;
      if (lp.engram_slot >= 0) {
        ++engram_blocks;
        const double hd = static_cast<double>(p.cfg.engram_head_dim);
        engram = static_cast<double>(batch * p.cfg.engram_hash_columns()) * (hd + hd / 32.0);
      }
      EXPECT_NEAR(got[b], dense[b] + want_experts + engram, 1e-6 * got[b]) << "block " << b;
    }
    EXPECT_GT(engram_blocks, 0);  // the preset has Engram layers: their rows are counted
  }
  // At batch 1 a block reads k of its E experts.
  std::vector<double> one;
  (void)weight_bytes_per_block(p.cfg, p.plan, 1, &one);
  const LayerPlan& l0 = p.plan[0];
  EXPECT_NEAR(one[0],
              routed[0] * static_cast<double>(l0.num_experts_per_tok) /
                  static_cast<double>(l0.n_routed_experts),
              1e-6 * one[0]);
}

// The draft step: the shared head once, the Markov head once per row position, the stages' dense
// weights, and their experts for batch x block_size rows; only the experts depend on the batch.
TEST(Roofline, DsparkStepFloorCountsHeadsStagesAndTheirExperts) {
  const Preset p = v41_flash();
  ASSERT_GT(p.cfg.num_nextn_predict_layers, 0);
  const WeightCatalogue cat(p.cfg, p.plan);
  double head = 0, markov = 0, stage_dense = 0;
  std::vector<double> stage_experts(p.plan.size(), 0.0);
  for (const WeightSpec& w : cat.entries()) {
    if (w.name == "head.weight") head += static_cast<double>(w.nbytes());
    if (w.block < p.cfg.num_layers) continue;
    if (w.name.find("markov_head.head.") != std::string::npos) {
      markov += static_cast<double>(w.nbytes());
    } else if (w.group == WeightGroup::kRoutedExperts) {
      stage_experts[static_cast<size_t>(w.block)] += static_cast<double>(w.nbytes());
    } else if (w.name.find("markov_head.embed.") == std::string::npos) {
      stage_dense += static_cast<double>(w.nbytes());
    }
  }
  ASSERT_GT(head, 0.0);
  ASSERT_GT(markov, 0.0);
  const int64_t bsz = p.cfg.dspark_block_size;
  for (const int64_t batch : {1, 4}) {
    double experts = 0;
    for (size_t b = static_cast<size_t>(p.cfg.num_layers); b < p.plan.size(); ++b) {
      const LayerPlan& lp = p.plan[b];
      experts += stage_experts[b] / static_cast<double>(lp.n_routed_experts) *
                 expected_experts(lp.n_routed_experts, lp.num_experts_per_tok, batch * bsz);
    }
    const double want = head + static_cast<double>(bsz) * markov + stage_dense + experts;
    EXPECT_NEAR(dspark_step_bytes(p.cfg, p.plan, batch), want, 1e-9 * want) << "batch " << batch;
  }
  EXPECT_GT(dspark_step_bytes(p.cfg, p.plan, 4), dspark_step_bytes(p.cfg, p.plan, 1));
}

}  // namespace
}  // namespace di::bench
