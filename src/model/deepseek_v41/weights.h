#pragma once

// The weights of a DeepSeek-V4.1 checkpoint bound for the CPU reference backend: large matrices
// stay zero-copy (WeightRef views into the mmapped shards, decoded row by row inside the GEMM);
// small vectors (norms, hc mixes, biases, sinks) are decoded once into the working precision T.

#include <cstdint>
#include <optional>
#include <vector>

#include "config/model_config.h"
#include "kernels/cpu/linear.h"
#include "loader/checkpoint.h"
#include "model/forward_api.h"
#include "model/layer_plan.h"

namespace di::v41 {

using cpu::WeightRef;

template <typename T>
struct HcParams {
  std::vector<T> fn;     // [(2 + hc) * hc, hc * dim]
  std::vector<T> base;   // [(2 + hc) * hc]
  std::vector<T> scale;  // [3]
};

struct ExpertWeights {
  WeightRef w1, w2, w3;
};

template <typename T>
struct BlockWeights {
  LayerPlan plan;
  std::vector<T> attn_norm, ffn_norm;
  HcParams<T> hc_attn, hc_ffn;
  // Attention.
  WeightRef wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<T> q_norm, kv_norm, attn_sink;
  // Compressor (kv sources).
  std::optional<WeightRef> comp_wkv, comp_wgate;
  std::vector<T> comp_norm;
  // Indexer (index sources); wk/k_norm only on kv sources.
  std::optional<WeightRef> idx_wq_b, idx_weights_proj, idx_wk;
  std::vector<T> idx_k_norm;
  // MoE.
  WeightRef gate;
  std::vector<T> gate_bias, gate_bias_vl;
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
  // Engram.
  std::optional<WeightRef> engram_table;  // FP8 rows with 1x32 E8M0 scales
  std::optional<WeightRef> engram_wkv;
  std::vector<T> engram_qk;  // q_weight * k_weight, [hc, dim]
  // DSpark extras (stage 0 / last stage).
  std::optional<WeightRef> main_proj;
  std::vector<T> main_norm;
  std::vector<T> final_norm;  // mtp.<last>.norm
  std::optional<WeightRef> markov_embed, markov_head, confidence_proj;
};

template <typename T>
struct ModelWeights {
  WeightRef embed, head;
  std::vector<T> norm;
  std::vector<BlockWeights<T>> blocks;  // backbone layers then draft stages
};

// Binds every tensor of the catalogue; throws di::Error naming the tensor on a mismatch.
template <typename T>
ModelWeights<T> bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt);

// Whether the Engram tables go resident (forward_api.h's EngramTables): kResident always, kMapped
// never, kAuto when table_bytes <= available_bytes / 2 (available 0, i.e. unknown: no).
bool engram_tables_go_resident(EngramTables mode, uint64_t table_bytes, uint64_t available_bytes);

// Makes the Engram tables of `w` resident (populate_read of their codes and scales) when
// engram_tables_go_resident says so for the memory available now; logs the choice. Returns the
// bytes made resident (0: left mapped, or the kernel lacks MADV_POPULATE_READ).
template <typename T>
uint64_t place_engram_tables(const ModelWeights<T>& w, EngramTables mode);

}  // namespace di::v41
