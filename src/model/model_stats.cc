#include "model/model_stats.h"

#include "common/check.h"

namespace di {

double StateBytes::bytes_per_token() const {
  double b = 0;
  for (const auto& o : owners) {
    b += static_cast<double>(o.kv_entry_bytes + o.index_entry_bytes) / static_cast<double>(o.ratio);
  }
  return b;
}

uint64_t StateBytes::sequence_bytes(int64_t tokens) const {
  uint64_t b = fixed_bytes();
  for (const auto& o : owners) {
    b += static_cast<uint64_t>((tokens / o.ratio) * (o.kv_entry_bytes + o.index_entry_bytes));
  }
  return b;
}

StateBytes compute_state_bytes(const ModelConfig& c, const std::vector<LayerPlan>& plan) {
  StateBytes s;
  s.window = c.sliding_window;
  s.swa_blocks = static_cast<int64_t>(plan.size());
  const int64_t hd = c.head_dim;
  if (c.is_v41()) {
    s.swa_entry_bytes = hd + hd / 32;           // e4m3 + UE8M0 per 32
    const int64_t kv_entry = hd / 2 + hd / 16;  // e2m1 + E4M3 per 16
    const int64_t idx_entry = c.index_head_dim / 2 + c.index_head_dim / 32;
    for (const auto& p : plan) {
      if (p.mode != AttnMode::kFull) continue;
      s.owners.push_back({p.index, p.compress_ratio, kv_entry, idx_entry});
      if (p.compress_ratio > 1) {
        // Partial group carried between steps: ratio rows of kv and of gate score, fp32.
        s.compressor_tail_bytes += static_cast<uint64_t>(p.compress_ratio * hd * 2 * 4);
      }
    }
    if (!c.engram_layer_ids.empty()) {
      s.engram_history_bytes = static_cast<uint64_t>((c.engram_max_ngram_size - 1) * 4);
    }
  } else {
    const int64_t nope = hd - c.rope_head_dim;
    const int64_t entry = nope + nope / 64 + c.rope_head_dim * 2;  // 448 + 7 + 128 = 583
    s.swa_entry_bytes = entry;
    const int64_t idx_entry = c.index_head_dim / 2 + c.index_head_dim / 32;
    for (const auto& p : plan) {
      if (p.mode == AttnMode::kCsa) {
        s.owners.push_back({p.index, p.compress_ratio, entry, idx_entry});
        // Main compressor: 2*ratio rows x 2*hd (value + score); indexer: 2*ratio x 2*index_hd.
        s.compressor_tail_bytes += static_cast<uint64_t>((2 * p.compress_ratio) * (2 * hd) * 2 * 4);
        s.compressor_tail_bytes +=
            static_cast<uint64_t>((2 * p.compress_ratio) * (2 * c.index_head_dim) * 2 * 4);
      } else if (p.mode == AttnMode::kHca) {
        s.owners.push_back({p.index, p.compress_ratio, entry, 0});
        s.compressor_tail_bytes += static_cast<uint64_t>(p.compress_ratio * hd * 2 * 4);
      }
    }
  }
  return s;
}

EpPlan plan_expert_parallel(const WeightCatalogue& cat, int ranks) {
  DI_CHECK(ranks >= 1, "--ep must be >= 1, got {}", ranks);
  EpPlan ep;
  ep.ranks = ranks;
  ep.per_rank.resize(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    ep.per_rank[static_cast<size_t>(r)].rank = r;
  for (const WeightSpec& s : cat.entries()) {
    if (s.group == WeightGroup::kEngram && s.name.find(".engram.embed.") != std::string::npos) {
      ep.host_engram_bytes += s.nbytes();
      continue;
    }
    if (s.group != WeightGroup::kRoutedExperts) {
      for (auto& r : ep.per_rank)
        r.replicated_bytes += s.nbytes();
      continue;
    }
    const int64_t experts = cat.plan().at(static_cast<size_t>(s.block)).n_routed_experts;
    const int64_t per_rank = (experts + ranks - 1) / ranks;
    const auto rank = static_cast<size_t>(s.expert / per_rank);
    ep.per_rank.at(rank).routed_expert_bytes += s.nbytes();
  }
  return ep;
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", b / double(1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.2f} KiB", b / double(1ull << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace di
