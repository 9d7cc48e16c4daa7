#include "config/model_config.h"

#include <algorithm>

#include "common/check.h"
#include "config/engram_params.h"

namespace di {

std::string_view model_family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::kDeepSeekV41:
      return "DeepSeek-V4.1";
    case ModelFamily::kDeepSeekV4:
      return "DeepSeek-V4";
  }
  return "?";
}

namespace {

void check_layer_list(const ModelConfig& c, const std::vector<int64_t>& ids, const char* key,
                      int64_t limit) {
  for (size_t i = 0; i < ids.size(); ++i) {
    DI_CHECK(ids[i] >= 0 && ids[i] < limit, "{}: {} names layer {} outside [0, {})", c.source, key,
             ids[i], limit);
    DI_CHECK(i == 0 || ids[i] > ids[i - 1], "{}: {} must be sorted and free of duplicates",
             c.source, key);
  }
}

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void validate_v41(const ModelConfig& c) {
  const int64_t L = c.num_layers;
  check_layer_list(c, c.kv_source_layer_ids, "kv_source_layer_ids", L);
  check_layer_list(c, c.index_source_layer_ids, "index_source_layer_ids", L);
  for (int64_t s : c.kv_source_layer_ids) {
    DI_CHECK(contains(c.index_source_layer_ids, s),
             "{}: kv source layer {} must also be an index source", c.source, s);
  }
  for (int64_t s : c.index_source_layer_ids) {
    DI_CHECK(c.compress_ratios[static_cast<size_t>(s)] > 0,
             "{}: source layer {} has compress ratio 0", c.source, s);
  }
  // Every compressed layer binds to the nearest kv source at or before it, at the same ratio.
  for (int64_t i = 0; i < L; ++i) {
    int64_t r = c.compress_ratios[static_cast<size_t>(i)];
    if (r == 0) continue;
    int64_t kv = -1;
    for (int64_t s : c.kv_source_layer_ids) {
      if (s <= i) kv = s;
    }
    DI_CHECK(kv >= 0, "{}: layer {} has compress ratio {} but no kv source at or before it",
             c.source, i, r);
    DI_CHECK(c.compress_ratios[static_cast<size_t>(kv)] == r,
             "{}: layer {} (ratio {}) binds to kv source {} with ratio {}", c.source, i, r, kv,
             c.compress_ratios[static_cast<size_t>(kv)]);
  }
  if (c.candidate_source_layer_id >= 0) {
    DI_CHECK(contains(c.index_source_layer_ids, c.candidate_source_layer_id),
             "{}: candidate_source_layer_id {} is not an index source", c.source,
             c.candidate_source_layer_id);
    DI_CHECK(c.candidate_topk_blocks > 0 && c.candidate_block_size > 0,
             "{}: candidate_topk_blocks and candidate_block_size must be positive", c.source);
  }
  DI_CHECK(c.index_n_heads > 0 && c.index_head_dim > 0 && c.index_topk > 0,
           "{}: index_n_heads, index_head_dim and index_topk must be positive", c.source);
  DI_CHECK(c.index_head_dim >= c.rope_head_dim,
           "{}: index_head_dim {} is smaller than qk_rope_head_dim {}", c.source, c.index_head_dim,
           c.rope_head_dim);
  // Engram.
  check_layer_list(c, c.engram_layer_ids, "engram_layer_ids", L);
  DI_CHECK(c.engram_layer_ids.size() == c.engram_num_embeddings.size(),
           "{}: engram_layer_ids has {} entries but engram_num_embeddings has {}", c.source,
           c.engram_layer_ids.size(), c.engram_num_embeddings.size());
  if (!c.engram_layer_ids.empty()) {
    DI_CHECK(c.engram_max_ngram_size >= 2 && c.engram_n_heads > 0 && c.engram_head_dim > 0 &&
                 c.engram_head_dim % 32 == 0 && c.engram_vocab_size > 1 &&
                 c.engram_compressed_vocab_size > 0,
             "{}: engram_* parameters are inconsistent (max_ngram >= 2, head_dim a multiple of 32)",
             c.source);
    EngramHashSpace hs = derive_engram_hash_space(c);
    for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
      DI_CHECK(hs.table_rows[i] == c.engram_num_embeddings[i],
               "{}: engram_num_embeddings[{}] = {} but the hash space of layer {} needs {} rows "
               "(sum of its primes)",
               c.source, i, c.engram_num_embeddings[i], c.engram_layer_ids[i], hs.table_rows[i]);
    }
  }
  // DSpark.
  if (c.num_nextn_predict_layers > 0) {
    DI_CHECK(c.dspark_block_size > 0 && c.dspark_markov_rank > 0 && c.dspark_n_routed_experts > 0 &&
                 c.dspark_num_experts_per_tok > 0 &&
                 c.dspark_num_experts_per_tok <= c.dspark_n_routed_experts,
             "{}: DSpark stages need dspark_block_size, dspark_markov_rank, "
             "dspark_n_routed_experts >= dspark_num_experts_per_tok > 0",
             c.source);
    DI_CHECK(!c.dspark_target_layer_ids.empty(), "{}: dspark_target_layer_ids is empty", c.source);
    check_layer_list(c, c.dspark_target_layer_ids, "dspark_target_layer_ids", L);
    DI_CHECK(c.dspark_noise_token_id >= 0 && c.dspark_noise_token_id < c.vocab_size,
             "{}: dspark_noise_token_id {} outside the vocabulary", c.source,
             c.dspark_noise_token_id);
  }
  for (int64_t b = L; b < c.num_blocks(); ++b) {
    DI_CHECK(c.compress_ratios[static_cast<size_t>(b)] == 0,
             "{}: draft block {} must have compress ratio 0", c.source, b);
  }
  DI_CHECK(c.quant.block_n > 0 && c.quant.block_k > 0, "{}: bad weight_block_size", c.source);
  if (c.vision.present) {
    DI_CHECK(c.vision.num_layers >= 0 && c.vision.hidden_size > 0 && c.vision.num_heads > 0 &&
                 c.vision.hidden_size % c.vision.num_heads == 0 && c.vision.patch_size > 0 &&
                 c.vision.downsample_ratio > 0 && c.vision.intermediate_size > 0,
             "{}: vision_config dimensions are inconsistent", c.source);
  }
}

void validate_v4(const ModelConfig& c) {
  for (int64_t i = 0; i < c.num_layers; ++i) {
    int64_t r = c.compress_ratios[static_cast<size_t>(i)];
    DI_CHECK(r == 0 || r == 4 || r == 128,
             "{}: V4 layer {} has compress ratio {} (expected 0, 4 or 128)", c.source, i, r);
  }
  DI_CHECK(c.num_hash_layers >= 0 && c.num_hash_layers <= c.num_layers,
           "{}: num_hash_layers {} outside [0, {}]", c.source, c.num_hash_layers, c.num_layers);
  DI_CHECK(c.index_n_heads > 0 && c.index_head_dim > 0 && c.index_topk > 0,
           "{}: index_n_heads, index_head_dim and index_topk must be positive", c.source);
}

}  // namespace

void validate_model_config(const ModelConfig& c) {
  auto positive = [&](int64_t v, const char* key) {
    DI_CHECK(v > 0, "{}: {} must be positive, got {}", c.source, key, v);
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.num_heads, "num_attention_heads");
  positive(c.head_dim, "head_dim");
  positive(c.rope_head_dim, "qk_rope_head_dim");
  positive(c.q_lora_rank, "q_lora_rank");
  positive(c.o_lora_rank, "o_lora_rank");
  positive(c.o_groups, "o_groups");
  positive(c.moe_intermediate_size, "moe_intermediate_size");
  positive(c.n_routed_experts, "n_routed_experts");
  positive(c.num_experts_per_tok, "num_experts_per_tok");
  positive(c.sliding_window, "sliding_window");
  positive(c.hc_mult, "hc_mult");
  DI_CHECK(c.n_shared_experts >= 0, "{}: n_shared_experts must be >= 0", c.source);
  DI_CHECK(c.num_nextn_predict_layers >= 0, "{}: num_nextn_predict_layers must be >= 0", c.source);
  DI_CHECK(c.num_experts_per_tok <= c.n_routed_experts,
           "{}: num_experts_per_tok {} exceeds n_routed_experts {}", c.source,
           c.num_experts_per_tok, c.n_routed_experts);
  DI_CHECK(c.rope_head_dim <= c.head_dim && c.rope_head_dim % 2 == 0,
           "{}: qk_rope_head_dim {} must be even and <= head_dim {}", c.source, c.rope_head_dim,
           c.head_dim);
  DI_CHECK((c.num_heads * c.head_dim) % c.o_groups == 0 && c.num_heads % c.o_groups == 0,
           "{}: num_attention_heads {} is not divisible by o_groups {}", c.source, c.num_heads,
           c.o_groups);
  DI_CHECK(c.rms_norm_eps > 0, "{}: rms_norm_eps must be positive", c.source);
  DI_CHECK(static_cast<int64_t>(c.compress_ratios.size()) == c.num_blocks(),
           "{}: compress_ratios has {} entries but the model has {} blocks ({} layers + {} draft)",
           c.source, c.compress_ratios.size(), c.num_blocks(), c.num_layers,
           c.num_nextn_predict_layers);
  for (int64_t r : c.compress_ratios) {
    DI_CHECK(r >= 0, "{}: compress_ratios holds a negative entry", c.source);
  }
  DI_CHECK(c.quant.expert_dtype == "fp4" || c.quant.expert_dtype == "fp8",
           "{}: expert_dtype '{}' must be fp4 or fp8", c.source, c.quant.expert_dtype);
  DI_CHECK(c.moe_intermediate_size % 2 == 0 && c.hidden_size % 2 == 0,
           "{}: FP4 packing needs even hidden_size and moe_intermediate_size", c.source);
  if (c.is_v41()) {
    validate_v41(c);
  } else {
    validate_v4(c);
  }
}

}  // namespace di
