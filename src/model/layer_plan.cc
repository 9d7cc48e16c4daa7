#include "model/layer_plan.h"

#include <algorithm>

#include "common/check.h"

namespace di {

std::string_view attn_mode_name(AttnMode m) {
  switch (m) {
    case AttnMode::kWindow:
      return "window";
    case AttnMode::kFull:
      return "full";
    case AttnMode::kReindex:
      return "reindex";
    case AttnMode::kReuse:
      return "reuse";
    case AttnMode::kCsa:
      return "csa";
    case AttnMode::kHca:
      return "hca";
  }
  return "?";
}

namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The greatest source id that does not exceed `layer` (sources write before consumers read).
int64_t bind(const std::vector<int64_t>& sources, int64_t layer) {
  int64_t found = -1;
  for (int64_t s : sources) {
    if (s <= layer) found = s;
  }
  return found;
}

}  // namespace

std::vector<LayerPlan> build_layer_plan(const ModelConfig& cfg) {
  std::vector<LayerPlan> plan;
  plan.reserve(static_cast<size_t>(cfg.num_blocks()));
  for (int64_t i = 0; i < cfg.num_blocks(); ++i) {
    LayerPlan p;
    p.index = i;
    p.compress_ratio = cfg.compress_ratios.at(static_cast<size_t>(i));
    const bool draft = i >= cfg.num_layers;
    if (draft) {
      p.draft_stage = i - cfg.num_layers;
      p.prefix = "mtp." + std::to_string(p.draft_stage) + ".";
    } else {
      p.prefix = "layers." + std::to_string(i) + ".";
    }
    p.n_routed_experts = cfg.n_routed_experts;
    p.num_experts_per_tok = cfg.num_experts_per_tok;
    if (cfg.is_v41()) {
      if (draft) {
        p.n_routed_experts = cfg.dspark_n_routed_experts;
        p.num_experts_per_tok = cfg.dspark_num_experts_per_tok;
      }
      if (!draft && p.compress_ratio > 0) {
        p.kv_source = bind(cfg.kv_source_layer_ids, i);
        p.index_source = bind(cfg.index_source_layer_ids, i);
        DI_CHECK(p.kv_source >= 0 && p.index_source >= 0, "layer {} has no kv/index source", i);
        if (contains(cfg.kv_source_layer_ids, i)) {
          p.mode = AttnMode::kFull;
        } else if (contains(cfg.index_source_layer_ids, i)) {
          p.mode = AttnMode::kReindex;
        } else {
          p.mode = AttnMode::kReuse;
        }
        const int64_t cand = cfg.candidate_source_layer_id;
        p.candidate_builder = cand == i;
        p.candidate_reader =
            cand >= 0 && cand < i && (p.mode == AttnMode::kFull || p.mode == AttnMode::kReindex);
      }
      auto it = std::find(cfg.engram_layer_ids.begin(), cfg.engram_layer_ids.end(), i);
      if (it != cfg.engram_layer_ids.end()) p.engram_slot = it - cfg.engram_layer_ids.begin();
    } else {
      if (p.compress_ratio == 4) {
        p.mode = AttnMode::kCsa;
      } else if (p.compress_ratio == 128) {
        p.mode = AttnMode::kHca;
      }
      if (p.mode != AttnMode::kWindow) p.kv_source = p.index_source = i;
      p.hash_routed = !draft && i < cfg.num_hash_layers;
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

}  // namespace di
