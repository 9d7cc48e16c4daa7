// Weight-byte rooflines of the forward benchmarks (bench/roofline.h).

#include "roofline.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "model/weight_catalogue.h"

namespace di::bench {

double expected_experts(int64_t E, int64_t k, int64_t batch) {
  const double miss = 1.0 - static_cast<double>(k) / static_cast<double>(E);
  return static_cast<double>(E) * (1.0 - std::pow(miss, static_cast<double>(batch)));
}

double expected_routed_bytes(const LayerPlan& p, double all_expert_bytes, int64_t tokens) {
  if (p.n_routed_experts <= 0) return 0.0;
  return all_expert_bytes / static_cast<double>(p.n_routed_experts) *
         expected_experts(p.n_routed_experts, p.num_experts_per_tok, tokens);
}

std::vector<double> weight_bytes_per_block(const ModelConfig& cfg,
                                           const std::vector<LayerPlan>& plan, int64_t batch,
                                           std::vector<double>* experts_out) {
  const WeightCatalogue cat(cfg, plan);
  const auto L = static_cast<size_t>(cfg.num_layers);
  std::vector<double> dense(L, 0.0), experts(L, 0.0);
  for (const WeightSpec& w : cat.entries()) {
    if (w.block < 0 || w.block >= cfg.num_layers) continue;
    const auto b = static_cast<size_t>(w.block);
    if (w.group == WeightGroup::kRoutedExperts) {
      experts[b] += static_cast<double>(w.nbytes());
    } else if (w.group == WeightGroup::kEngram &&
               w.name.find("engram.embed.") != std::string::npos) {
      continue;  // host table: counted as staged rows below
    } else {
      dense[b] += static_cast<double>(w.nbytes());
    }
  }
  std::vector<double> out(L), routed(L, 0.0);
  for (size_t b = 0; b < L; ++b) {
    const LayerPlan& p = plan[b];
    routed[b] = expected_routed_bytes(p, experts[b], batch);
    out[b] = dense[b] + routed[b];
    if (p.engram_slot >= 0) {
      const double hd = static_cast<double>(cfg.engram_head_dim);
      out[b] += static_cast<double>(batch) * static_cast<double>(cfg.engram_hash_columns()) *
                (hd + hd / 32.0);
    }
  }
  if (experts_out != nullptr) *experts_out = std::move(routed);
  return out;
}

double dspark_step_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan,
                         int64_t batch) {
  const WeightCatalogue cat(cfg, plan);
  const int64_t rows = batch * cfg.dspark_block_size;
  std::map<int64_t, double> experts;
  double bytes = 0;
  for (const WeightSpec& w : cat.entries()) {
    if (w.name == "head.weight") bytes += static_cast<double>(w.nbytes());
    if (w.block < cfg.num_layers) continue;
    if (w.name.find("markov_head.head.") != std::string::npos) {
      bytes += static_cast<double>(cfg.dspark_block_size) * static_cast<double>(w.nbytes());
    } else if (w.group == WeightGroup::kRoutedExperts) {
      experts[w.block] += static_cast<double>(w.nbytes());
    } else if (w.name.find("markov_head.embed.") == std::string::npos) {
      bytes += static_cast<double>(w.nbytes());  // dense stage weights (embed: rows gathered)
    }
  }
  for (const auto& [b, e] : experts)
    bytes += expected_routed_bytes(plan.at(static_cast<size_t>(b)), e, rows);
  return bytes;
}

}  // namespace di::bench
