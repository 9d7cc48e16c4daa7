#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"

namespace di {

// How a block's attention gets its long-range context.
enum class AttnMode {
  kWindow,   // sliding window only (ratio 0; V4.1 layers 0-1, draft blocks)
  kFull,     // V4.1: owns compressor + indexer keys + own top-k (kv source and index source)
  kReindex,  // V4.1: own top-k over its kv source's keys (index source, not kv source)
  kReuse,    // V4.1: reads its owner's compressed KV and top-k
  kCsa,      // V4: own compressor (ratio 4, overlapping) + own indexer with its own compressor
  kHca,      // V4: own compressor (ratio 128), attends all compressed entries
};
std::string_view attn_mode_name(AttnMode m);

// One block of the model (backbone layer or draft stage), with every binding resolved.
struct LayerPlan {
  int64_t index = 0;         // block index: 0..num_layers-1 backbone, then draft blocks
  int64_t draft_stage = -1;  // >= 0 for draft blocks (stored under "mtp.<stage>.")
  std::string prefix;        // checkpoint name prefix: "layers.<i>." or "mtp.<s>."
  int64_t compress_ratio = 0;
  AttnMode mode = AttnMode::kWindow;
  int64_t kv_source = -1;     // block whose compressed KV this one reads (itself when it owns it)
  int64_t index_source = -1;  // block whose top-k selection this one uses
  bool candidate_builder = false;  // builds the candidate pool (V4.1 candidate source)
  bool candidate_reader = false;   // runs its top-k inside the candidate pool
  int64_t engram_slot = -1;        // index into engram_layer_ids, or -1
  bool hash_routed = false;        // V4: routes by token id (tid2eid)
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  bool is_draft() const { return draft_stage >= 0; }
  bool owns_compressed_kv() const {
    return mode == AttnMode::kFull || mode == AttnMode::kCsa || mode == AttnMode::kHca;
  }
};

// Derives the plan of every block from the config (backbone layers, then draft blocks).
std::vector<LayerPlan> build_layer_plan(const ModelConfig& cfg);

}  // namespace di
