// Parsing of the three config layouts into one ModelConfig.

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/logging.h"
#include "config/json_reader.h"
#include "config/model_config.h"

namespace di {
namespace {

using config_detail::JsonReader;
using nlohmann::json;

// Keys that describe the file rather than the model (or training-only knobs): accepted silently.
void ignore_metadata(JsonReader& r) {
  r.ignore({"architectures", "model_type", "dtype", "torch_dtype", "transformers_version",
            "attention_bias", "attention_dropout", "initializer_range", "use_cache", "auto_map",
            "_name_or_path", "name_or_path",
            // reference runtime arguments (inference/config.json of a run)
            "max_batch_size", "max_seq_len", "temperature"});
}

// Text-model fields; every key is looked up under its HF name and its reference name.
void read_text_fields(JsonReader& r, ModelConfig& c) {
  c.vocab_size = r.req_int({"vocab_size"});
  c.hidden_size = r.req_int({"hidden_size", "dim"});
  c.num_layers = r.req_int({"num_hidden_layers", "n_layers"});
  c.num_heads = r.req_int({"num_attention_heads", "n_heads"});
  c.num_kv_heads = r.opt_int({"num_key_value_heads"}, 1);
  c.head_dim = r.req_int({"head_dim"});
  c.rope_head_dim = r.req_int({"qk_rope_head_dim", "rope_head_dim"});
  c.q_lora_rank = r.req_int({"q_lora_rank"});
  c.o_lora_rank = r.req_int({"o_lora_rank"});
  c.o_groups = r.req_int({"o_groups"});
  c.moe_intermediate_size = r.req_int({"moe_intermediate_size", "moe_inter_dim"});
  c.n_routed_experts = r.req_int({"n_routed_experts"});
  c.n_shared_experts = r.req_int({"n_shared_experts"});
  c.num_experts_per_tok = r.req_int({"num_experts_per_tok", "n_activated_experts"});
  c.scoring_func = r.opt_string({"scoring_func", "score_func"}, "sqrtsoftplus");
  c.topk_method = r.opt_string({"topk_method"}, "noaux_tc");
  c.norm_topk_prob = r.opt_bool({"norm_topk_prob"}, true);
  c.routed_scaling_factor = r.req_double({"routed_scaling_factor", "route_scale"});
  c.gate_temp = r.opt_double({"gate_temp"}, 1.0);
  c.hidden_act = r.opt_string({"hidden_act"}, "silu");
  c.swiglu_limit = r.req_double({"swiglu_limit"});
  c.rms_norm_eps = r.req_double({"rms_norm_eps", "norm_eps"});
  c.max_position_embeddings = r.opt_int({"max_position_embeddings"}, 1048576);
  c.rope_theta = r.opt_double({"rope_theta"}, 10000.0);
  c.compress_rope_theta = r.opt_double({"compress_rope_theta"}, 160000.0);
  if (const json* rs = r.object("rope_scaling")) {
    JsonReader s(*rs, r.where() + " rope_scaling");
    c.rope_scaling.type = s.opt_string({"rope_type", "type"}, "yarn");
    c.rope_scaling.factor = s.req_double({"factor"});
    c.rope_scaling.beta_fast = s.opt_double({"beta_fast"}, 32.0);
    c.rope_scaling.beta_slow = s.opt_double({"beta_slow"}, 1.0);
    c.rope_scaling.original_max_position_embeddings =
        s.req_int({"original_max_position_embeddings"});
    s.ignore({"mscale", "mscale_all_dim"});
    for (auto& w : s.unknown_key_warnings())
      c.warnings.push_back(std::move(w));
  } else {
    // Reference names (flat).
    c.rope_scaling.factor = r.opt_double({"rope_factor"}, 1.0);
    c.rope_scaling.beta_fast = r.opt_double({"beta_fast"}, 32.0);
    c.rope_scaling.beta_slow = r.opt_double({"beta_slow"}, 1.0);
    c.rope_scaling.original_max_position_embeddings = r.opt_int({"original_seq_len"}, 0);
  }
  c.sliding_window = r.req_int({"sliding_window", "window_size"});
  c.compress_ratios = r.req_int_list({"compress_ratios"});
  c.index_n_heads = r.opt_int({"index_n_heads"}, 0);
  c.index_head_dim = r.opt_int({"index_head_dim"}, 0);
  c.index_topk = r.opt_int({"index_topk"}, 0);
  c.kv_source_layer_ids = r.opt_int_list({"kv_source_layer_ids", "kv_source_layers"});
  c.index_source_layer_ids = r.opt_int_list({"index_source_layer_ids", "index_source_layers"});
  c.candidate_source_layer_id =
      r.opt_int({"candidate_source_layer_id", "candidate_source_layer"}, -1);
  c.candidate_topk_blocks = r.opt_int({"candidate_topk_blocks"}, 0);
  c.candidate_block_size = r.opt_int({"candidate_block_size"}, 0);
  c.hc_mult = r.opt_int({"hc_mult"}, 4);
  c.hc_sinkhorn_iters = r.opt_int({"hc_sinkhorn_iters"}, 20);
  c.hc_eps = r.opt_double({"hc_eps"}, 1e-6);
  c.engram_layer_ids = r.opt_int_list({"engram_layer_ids"});
  c.engram_num_embeddings = r.opt_int_list({"engram_num_embeddings"});
  if (!c.engram_layer_ids.empty()) {
    c.engram_max_ngram_size = r.req_int({"engram_max_ngram_size"});
    c.engram_vocab_size = r.req_int({"engram_vocab_size"});
    c.engram_n_heads = r.req_int({"engram_n_heads"});
    c.engram_head_dim = r.req_int({"engram_head_dim"});
    c.engram_pad_token_id =
        r.opt_int({"engram_pad_token_id", "engram_pad_id"}, 2);  // ModelArgs default
    c.engram_compressed_vocab_size = r.req_int({"engram_compressed_vocab_size"});
  } else {
    r.ignore({"engram_max_ngram_size", "engram_vocab_size", "engram_n_heads", "engram_head_dim",
              "engram_pad_token_id", "engram_pad_id", "engram_compressed_vocab_size"});
  }
  c.num_nextn_predict_layers = r.opt_int({"num_nextn_predict_layers", "n_mtp_layers"}, 0);
  c.dspark_block_size = r.opt_int({"dspark_block_size"}, 0);
  c.dspark_noise_token_id = r.opt_int({"dspark_noise_token_id"}, -1);
  c.dspark_target_layer_ids = r.opt_int_list({"dspark_target_layer_ids"});
  c.dspark_markov_rank = r.opt_int({"dspark_markov_rank"}, 0);
  c.dspark_n_routed_experts = r.opt_int({"dspark_n_routed_experts"}, 0);
  c.dspark_num_experts_per_tok =
      r.opt_int({"dspark_num_experts_per_tok", "dspark_n_activated_experts"}, 0);
  c.num_hash_layers = r.opt_int({"num_hash_layers", "n_hash_layers"}, 0);
  c.tie_word_embeddings = r.opt_bool({"tie_word_embeddings"}, false);
  if (auto v = r.maybe_int({"image_token_id"})) c.image_token_id = v;
  if (auto v = r.maybe_int({"bos_token_id"})) c.bos_token_id = *v;
  if (auto v = r.maybe_int({"eos_token_id"})) c.eos_token_id = *v;
  if (auto v = r.maybe_int({"pad_token_id"})) c.pad_token_id = v;
}

void read_quantization(JsonReader& q, ModelConfig& c) {
  c.quant.quant_method = q.opt_string({"quant_method"}, "fp8");
  c.quant.activation_scheme = q.opt_string({"activation_scheme"}, "dynamic");
  c.quant.fmt = q.opt_string({"fmt"}, "e4m3");
  c.quant.scale_fmt = q.opt_string({"scale_fmt"}, "ue8m0");
  c.quant.expert_dtype = q.opt_string({"expert_dtype"}, c.quant.expert_dtype);
  std::vector<int64_t> block = q.req_int_list({"weight_block_size"});
  DI_CHECK(block.size() == 2 && block[0] > 0 && block[1] > 0,
           "{}: weight_block_size must be two positive integers", q.where());
  c.quant.block_n = block[0];
  c.quant.block_k = block[1];
}

// Vision tower: HF names inside vision_config, or the reference's flat vision_* names.
void read_vision(JsonReader& v, ModelConfig& c, bool reference_names) {
  c.vision.present = true;
  auto pick = [&](const char* hf, const char* ref) { return reference_names ? ref : hf; };
  c.vision.num_layers = v.req_int({pick("num_hidden_layers", "vision_n_layers")});
  c.vision.hidden_size = v.req_int({pick("hidden_size", "vision_dim")});
  c.vision.num_heads = v.req_int({pick("num_attention_heads", "vision_n_heads")});
  c.vision.intermediate_size = v.req_int({pick("intermediate_size", "vision_inter_dim")});
  c.vision.patch_size = v.req_int({pick("patch_size", "vision_patch_size")});
  c.vision.rope_theta = v.opt_double({pick("rope_theta", "vision_rope_theta")}, 10000.0);
  c.vision.downsample_ratio = v.req_int({pick("downsample_ratio", "vision_downsample_ratio")});
  c.vision.max_image_tokens = v.opt_int({pick("max_image_tokens", "vision_max_n_token")}, 0);
  c.vision.min_pixels = v.opt_int({pick("min_pixels", "vision_min_pixels")}, 0);
  const json* r = v.find({pick("max_wh_ratio", "vision_max_wh_ratio")});
  if (r != nullptr && !r->is_null()) {
    DI_CHECK(r->is_number(), "{}: max_wh_ratio must be a number or null", v.where());
    c.vision.max_wh_ratio = r->get<double>();
  }
}

void finish(JsonReader& r, ModelConfig& c) {
  for (auto& w : r.unknown_key_warnings())
    c.warnings.push_back(std::move(w));
}

ModelConfig parse_nested_v41(const json& root, const std::string& source) {
  ModelConfig c;
  c.source = source;
  c.family = ModelFamily::kDeepSeekV41;
  JsonReader r(root, source);
  c.model_type = r.opt_string({"model_type"}, "deepseek_v41");
  ignore_metadata(r);
  const json* text = r.object("text_config");
  JsonReader t(*text, source + " text_config");
  t.ignore({"model_type"});
  ignore_metadata(t);
  read_text_fields(t, c);
  // Root-level token ids win over text_config ones (the release keeps them at the root).
  if (auto v = r.maybe_int({"bos_token_id"})) c.bos_token_id = *v;
  if (auto v = r.maybe_int({"eos_token_id"})) c.eos_token_id = *v;
  if (auto v = r.maybe_int({"pad_token_id"})) c.pad_token_id = v;
  if (auto v = r.maybe_int({"image_token_id"})) c.image_token_id = v;
  c.tie_word_embeddings = r.opt_bool({"tie_word_embeddings"}, c.tie_word_embeddings);
  c.quant.block_n = c.quant.block_k = 32;
  if (const json* q = r.object("quantization_config")) {
    JsonReader qr(*q, source + " quantization_config");
    read_quantization(qr, c);
    finish(qr, c);
  } else {
    DI_FAIL("{}: required key 'quantization_config' is missing", source);
  }
  if (const json* v = r.object("vision_config")) {
    JsonReader vr(*v, source + " vision_config");
    vr.ignore({"model_type"});
    ignore_metadata(vr);
    read_vision(vr, c, /*reference_names=*/false);
    finish(vr, c);
  }
  finish(t, c);
  finish(r, c);
  return c;
}

ModelConfig parse_flat(const json& root, const std::string& source) {
  ModelConfig c;
  c.source = source;
  JsonReader r(root, source);
  const bool reference_names = root.contains("dim") || root.contains("n_layers");
  std::string model_type = r.opt_string({"model_type"}, "");
  bool v41 = model_type == "deepseek_v41" || model_type == "deepseek_v41_text";
  if (model_type.empty()) {
    v41 = root.contains("kv_source_layers") || root.contains("kv_source_layer_ids") ||
          root.contains("engram_layer_ids");
  } else if (!v41 && model_type != "deepseek_v4") {
    DI_FAIL(
        "{}: model_type '{}' is not a DeepSeek-V4-family model (expected deepseek_v4 or "
        "deepseek_v41)",
        source, model_type);
  }
  c.family = v41 ? ModelFamily::kDeepSeekV41 : ModelFamily::kDeepSeekV4;
  c.model_type = model_type.empty() ? (v41 ? "deepseek_v41" : "deepseek_v4") : model_type;
  ignore_metadata(r);
  read_text_fields(r, c);
  c.quant.block_n = c.quant.block_k = v41 ? 32 : 128;
  if (const json* q = r.object("quantization_config")) {
    JsonReader qr(*q, source + " quantization_config");
    read_quantization(qr, c);
    finish(qr, c);
  } else if (!reference_names) {
    DI_FAIL("{}: required key 'quantization_config' is missing", source);
  }
  // Top-level quantization keys (V4 config.json: expert_dtype; reference: dtype/scale_fmt).
  c.quant.expert_dtype = r.opt_string({"expert_dtype"}, c.quant.expert_dtype);
  if (reference_names) {
    std::string dtype = r.opt_string({"dtype"}, "fp8");
    DI_CHECK(dtype == "fp8" || dtype == "bf16", "{}: dtype '{}' must be fp8 or bf16", source,
             dtype);
    c.quant.scale_fmt = r.opt_string({"scale_fmt"}, c.quant.scale_fmt);
    c.quant.quant_method = dtype;
    if (r.has({"vision_n_layers"}) && r.opt_int({"vision_n_layers"}, 0) > 0) {
      read_vision(r, c, /*reference_names=*/true);
    } else {
      r.ignore({"vision_n_layers", "vision_dim", "vision_n_heads", "vision_inter_dim",
                "vision_patch_size", "vision_rope_theta", "vision_downsample_ratio",
                "vision_max_n_token", "vision_min_pixels", "vision_max_wh_ratio"});
    }
  }
  finish(r, c);
  return c;
}

}  // namespace

ModelConfig parse_model_config(std::string_view json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    DI_FAIL("{}: malformed JSON: {}", source, e.what());
  }
  DI_CHECK(root.is_object(), "{}: top level must be a JSON object", source);
  ModelConfig c =
      root.contains("text_config") ? parse_nested_v41(root, source) : parse_flat(root, source);
  if (c.is_v41() && c.model_type != "deepseek_v41" && c.model_type != "deepseek_v41_text") {
    DI_FAIL("{}: model_type '{}' with a nested text_config is not DeepSeek-V4.1", source,
            c.model_type);
  }
  // V4 ships compress_ratios with trailing padding entries beyond the MTP block.
  if (static_cast<int64_t>(c.compress_ratios.size()) > c.num_blocks()) {
    c.warnings.push_back(
        fmt::format("{}: compress_ratios has {} entries for {} blocks; the extra "
                    "trailing entries are ignored",
                    source, c.compress_ratios.size(), c.num_blocks()));
    c.compress_ratios.resize(static_cast<size_t>(c.num_blocks()));
  }
  validate_model_config(c);
  for (const auto& w : c.warnings)
    DI_LOG_WARN("{}", w);
  return c;
}

ModelConfig load_model_config_file(const std::filesystem::path& file) {
  std::ifstream f(file, std::ios::binary);
  DI_CHECK(f.good(), "{}: cannot open config file", file.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_model_config(ss.str(), file.string());
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  DI_CHECK(fs::is_directory(model_dir), "{}: not a model directory", model_dir.string());
  for (const char* name : {"config.json", "inference/config.json", "inference_config.json"}) {
    fs::path p = model_dir / name;
    if (fs::is_regular_file(p)) return load_model_config_file(p);
  }
  DI_FAIL("{}: no config.json (nor inference/config.json) found", model_dir.string());
}

}  // namespace di
