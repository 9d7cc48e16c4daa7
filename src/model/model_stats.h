#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/layer_plan.h"
#include "model/weight_catalogue.h"

namespace di {

// Per-sequence decode state of a model in DeepInfer's storage formats (delta spec §3.1):
// V4.1: SWA rings e4m3 x head_dim + one UE8M0 per 32; compressed KV e2m1 + E4M3 per 16; index
// keys e2m1 + UE8M0 per 32; fp32 compressor tails (kv + score rows) for pooling owners.
// V4: the compact lossless layout of deepseek-v4-spec §3.2 (448 e4m3 + 7 e8m0 + 64 bf16 = 583 B).
struct StateBytes {
  struct Owner {
    int64_t block = 0;
    int64_t ratio = 0;
    int64_t kv_entry_bytes = 0;     // one compressed KV entry
    int64_t index_entry_bytes = 0;  // one index key (0 when the owner has none)
  };
  int64_t window = 0;
  int64_t swa_entry_bytes = 0;
  int64_t swa_blocks = 0;  // blocks holding a ring (backbone + draft)
  std::vector<Owner> owners;
  uint64_t compressor_tail_bytes = 0;  // per sequence, all pooling owners
  uint64_t engram_history_bytes = 0;   // per sequence

  uint64_t swa_bytes() const {
    return static_cast<uint64_t>(window * swa_entry_bytes * swa_blocks);
  }
  uint64_t fixed_bytes() const {
    return swa_bytes() + compressor_tail_bytes + engram_history_bytes;
  }
  // Growing bytes per token (fractional for ratio > 1 owners).
  double bytes_per_token() const;
  // Exact bytes of one sequence of `tokens` tokens: fixed + whole emitted entries per owner.
  uint64_t sequence_bytes(int64_t tokens) const;
};

StateBytes compute_state_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan);

// Weight memory per expert-parallel rank: every tensor except routed experts is replicated;
// routed experts of each block are split in contiguous ranges (rank r holds experts
// [r*ceil(E/N), (r+1)*ceil(E/N))). Engram tables are host-resident and counted apart.
struct EpRankMemory {
  int rank = 0;
  uint64_t replicated_bytes = 0;
  uint64_t routed_expert_bytes = 0;
  uint64_t device_bytes() const { return replicated_bytes + routed_expert_bytes; }
};
struct EpPlan {
  int ranks = 1;
  uint64_t host_engram_bytes = 0;
  std::vector<EpRankMemory> per_rank;
};
EpPlan plan_expert_parallel(const WeightCatalogue& cat, int ranks);

std::string format_bytes(uint64_t bytes);  // "475.24 GiB"

}  // namespace di
