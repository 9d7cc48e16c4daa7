#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace di {

enum class ModelFamily {
  kDeepSeekV41,  // DeepSeek-V4.1-Flash: CSA2, Engram, single-pass mHC, DSpark, vision
  kDeepSeekV4,   // DeepSeek-V4-Flash: CSA/HCA, hash-routed layers, MTP, hc_head
};
std::string_view model_family_name(ModelFamily f);

struct RopeScaling {
  std::string type = "yarn";
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position_embeddings = 0;
};

struct QuantizationConfig {
  std::string quant_method = "fp8";
  std::string activation_scheme = "dynamic";
  std::string fmt = "e4m3";
  std::string scale_fmt = "ue8m0";
  std::string expert_dtype = "fp4";  // routed experts: "fp4" (I8 nibbles + E8M0/32) or "fp8"
  int64_t block_n = 128;             // weight_block_size[0] (output rows per scale)
  int64_t block_k = 128;             // weight_block_size[1] (input columns per scale)
};

struct VisionConfig {
  bool present = false;
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t intermediate_size = 0;
  int64_t patch_size = 0;
  double rope_theta = 10000.0;
  int64_t downsample_ratio = 0;
  int64_t max_image_tokens = 0;
  int64_t min_pixels = 0;
  std::optional<double> max_wh_ratio;
};

// Every architecture parameter of a DeepSeek-V4-family checkpoint, parsed once and validated.
// Field names follow the HF config (reference ModelArgs names in comments).
struct ModelConfig {
  ModelFamily family = ModelFamily::kDeepSeekV41;
  std::string model_type;
  std::string source;  // file it was read from (for messages)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // dim
  int64_t num_layers = 0;   // num_hidden_layers / n_layers (backbone only)
  int64_t num_heads = 0;    // n_heads
  int64_t num_kv_heads = 1;
  int64_t head_dim = 0;
  int64_t rope_head_dim = 0;  // qk_rope_head_dim
  int64_t q_lora_rank = 0;
  int64_t o_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t moe_intermediate_size = 0;  // moe_inter_dim
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;  // n_activated_experts
  std::string scoring_func = "sqrtsoftplus";
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;  // route_scale
  double gate_temp = 1.0;
  std::string hidden_act = "silu";
  double swiglu_limit = 0.0;
  double rms_norm_eps = 1e-6;  // norm_eps
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  RopeScaling rope_scaling;
  int64_t sliding_window = 0;  // window_size
  // One entry per block: backbone layers then draft (MTP/DSpark) blocks. V4 checkpoints may ship
  // a longer list (trailing padding); it is truncated to num_layers + num_nextn_predict_layers.
  std::vector<int64_t> compress_ratios;

  // Indexer (V4: every ratio-4 layer; V4.1: index sources).
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  // V4.1 CSA2 sharing.
  std::vector<int64_t> kv_source_layer_ids;
  std::vector<int64_t> index_source_layer_ids;
  int64_t candidate_source_layer_id = -1;
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;

  // Hyper-connections.
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  // Engram (V4.1).
  std::vector<int64_t> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;
  int64_t engram_max_ngram_size = 0;
  int64_t engram_vocab_size = 0;
  int64_t engram_n_heads = 0;
  int64_t engram_head_dim = 0;
  int64_t engram_pad_token_id = 2;
  int64_t engram_compressed_vocab_size = 0;

  // Draft blocks: V4 classic MTP (num_nextn_predict_layers = 1) or V4.1 DSpark stages.
  int64_t num_nextn_predict_layers = 0;  // n_mtp_layers
  int64_t dspark_block_size = 0;
  int64_t dspark_noise_token_id = -1;
  std::vector<int64_t> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 0;
  int64_t dspark_n_routed_experts = 0;
  int64_t dspark_num_experts_per_tok = 0;

  // V4 only.
  int64_t num_hash_layers = 0;  // n_hash_layers

  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> image_token_id;
  bool tie_word_embeddings = false;

  QuantizationConfig quant;
  VisionConfig vision;

  // Warnings produced while parsing (unknown keys, one per key). Also logged.
  std::vector<std::string> warnings;

  bool is_v41() const { return family == ModelFamily::kDeepSeekV41; }
  int64_t num_blocks() const { return num_layers + num_nextn_predict_layers; }
  int64_t engram_hash_columns() const { return (engram_max_ngram_size - 1) * engram_n_heads; }
};

// Parses a config file. Accepts the nested V4.1 config.json (root / text_config /
// vision_config / quantization_config), the flat V4 config.json, and the reference's flat
// inference/config.json (ModelArgs names: dim, n_layers, ...). Missing required keys and
// inconsistent values throw di::Error naming the file and key; unknown keys give one warning
// each.
ModelConfig parse_model_config(std::string_view json_text, const std::string& source);
ModelConfig load_model_config_file(const std::filesystem::path& file);
// Finds the config of a model directory: config.json, else inference/config.json, else
// inference_config.json.
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// Consistency checks over the parsed values (list lengths, layer ids in range, divisibility).
// Called by the parsers; exposed for configs built in code (synth --layers/--experts).
void validate_model_config(const ModelConfig& cfg);

}  // namespace di
