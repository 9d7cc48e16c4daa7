#include "model/synth.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "common/check.h"
#include "common/logging.h"
#include "core/host_buffer.h"
#include "loader/safetensors_writer.h"
#include "model/layer_plan.h"
#include "model/synth_payload.h"
#include "model/weight_catalogue.h"

namespace di {

namespace embedded {
extern const std::string_view kV41FlashConfig;
extern const std::string_view kV4FlashConfig;
extern const std::string_view kV41TinyConfig;
}  // namespace embedded

namespace fs = std::filesystem;
using nlohmann::json;

json preset_config_json(std::string_view name) {
  if (name == "v41-flash") return json::parse(embedded::kV41FlashConfig);
  if (name == "v4-flash") return json::parse(embedded::kV4FlashConfig);
  if (name == "v41-tiny") return json::parse(embedded::kV41TinyConfig);
  DI_FAIL(
      "unknown config preset '{}' (expected v41-flash, v4-flash, v41-tiny or a config.json path)",
      name);
}

json load_config_json(const std::string& preset_or_path) {
  if (preset_or_path == "v41-flash" || preset_or_path == "v4-flash" ||
      preset_or_path == "v41-tiny") {
    return preset_config_json(preset_or_path);
  }
  fs::path p(preset_or_path);
  if (fs::is_directory(p)) p /= "config.json";
  std::ifstream f(p, std::ios::binary);
  DI_CHECK(f.good(), "{}: cannot open config (not a preset name or readable file)", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::parse_error& e) {
    DI_FAIL("{}: malformed JSON: {}", p.string(), e.what());
  }
}

json to_reference_config_json(const ModelConfig& c) {
  json j;
  j["vocab_size"] = c.vocab_size;
  j["dim"] = c.hidden_size;
  j["moe_inter_dim"] = c.moe_intermediate_size;
  j["n_layers"] = c.num_layers;
  j["n_mtp_layers"] = c.num_nextn_predict_layers;
  j["n_heads"] = c.num_heads;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["n_activated_experts"] = c.num_experts_per_tok;
  j["score_func"] = c.scoring_func;
  j["route_scale"] = c.routed_scaling_factor;
  j["gate_temp"] = c.gate_temp;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["swiglu_limit"] = c.swiglu_limit;
  j["norm_eps"] = c.rms_norm_eps;
  j["q_lora_rank"] = c.q_lora_rank;
  j["head_dim"] = c.head_dim;
  j["rope_head_dim"] = c.rope_head_dim;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["window_size"] = c.sliding_window;
  j["original_seq_len"] = c.rope_scaling.original_max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  j["rope_factor"] = c.rope_scaling.factor;
  j["beta_fast"] = c.rope_scaling.beta_fast;
  j["beta_slow"] = c.rope_scaling.beta_slow;
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["compress_ratios"] = c.compress_ratios;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["dtype"] = "fp8";
  j["scale_fmt"] = c.quant.scale_fmt;
  j["expert_dtype"] = c.quant.expert_dtype;
  if (c.is_v41()) {
    j["kv_source_layers"] = c.kv_source_layer_ids;
    j["index_source_layers"] = c.index_source_layer_ids;
    j["candidate_source_layer"] = c.candidate_source_layer_id;
    j["candidate_topk_blocks"] = c.candidate_topk_blocks;
    j["candidate_block_size"] = c.candidate_block_size;
    if (!c.engram_layer_ids.empty()) {
      j["engram_layer_ids"] = c.engram_layer_ids;
      j["engram_num_embeddings"] = c.engram_num_embeddings;
      j["engram_max_ngram_size"] = c.engram_max_ngram_size;
      j["engram_vocab_size"] = c.engram_vocab_size;
      j["engram_n_heads"] = c.engram_n_heads;
      j["engram_head_dim"] = c.engram_head_dim;
      j["engram_pad_id"] = c.engram_pad_token_id;
      j["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
    }
    if (c.num_nextn_predict_layers > 0) {
      j["dspark_block_size"] = c.dspark_block_size;
      j["dspark_noise_token_id"] = c.dspark_noise_token_id;
      j["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
      j["dspark_markov_rank"] = c.dspark_markov_rank;
      j["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
      j["dspark_n_activated_experts"] = c.dspark_num_experts_per_tok;
    }
    if (c.image_token_id) j["image_token_id"] = *c.image_token_id;
    j["vision_n_layers"] = c.vision.present ? c.vision.num_layers : 0;
    if (c.vision.present) {
      j["vision_dim"] = c.vision.hidden_size;
      j["vision_n_heads"] = c.vision.num_heads;
      j["vision_inter_dim"] = c.vision.intermediate_size;
      j["vision_patch_size"] = c.vision.patch_size;
      j["vision_rope_theta"] = c.vision.rope_theta;
      j["vision_downsample_ratio"] = c.vision.downsample_ratio;
      j["vision_max_n_token"] = c.vision.max_image_tokens;
      j["vision_min_pixels"] = c.vision.min_pixels;
      j["vision_max_wh_ratio"] =
          c.vision.max_wh_ratio ? json(*c.vision.max_wh_ratio) : json(nullptr);
    }
  } else {
    j["n_hash_layers"] = c.num_hash_layers;
  }
  return j;
}

json shrink_config_json(json cfg, const SynthOptions& opt) {
  DI_CHECK(cfg.is_object(), "synth: config must be a JSON object");
  DI_CHECK(!cfg.contains("dim"),
           "synth: needs a Hugging Face config.json, not the reference's "
           "flat inference/config.json");
  const bool nested = cfg.contains("text_config");
  json& t = nested ? cfg["text_config"] : cfg;
  DI_CHECK(t.contains("num_hidden_layers") && t.contains("compress_ratios"),
           "synth: config lacks num_hidden_layers/compress_ratios");
  const int64_t old_layers = t["num_hidden_layers"].get<int64_t>();
  const int64_t old_draft = t.value("num_nextn_predict_layers", int64_t{0});
  const int64_t draft = opt.draft_blocks.value_or(old_draft);
  DI_CHECK(!(opt.layers && !opt.layer_ids.empty()),
           "synth: --layers and --layer-ids exclude each other");
  // The kept backbone layers by original id, ascending.
  std::vector<int64_t> kept = opt.layer_ids;
  if (kept.empty()) {
    const int64_t layers = opt.layers.value_or(old_layers);
    DI_CHECK(layers >= 1 && layers <= old_layers, "synth: --layers {} outside [1, {}]", layers,
             old_layers);
    for (int64_t i = 0; i < layers; ++i)
      kept.push_back(i);
  } else {
    DI_CHECK(t.contains("kv_source_layer_ids"),
             "synth: --layer-ids needs a DeepSeek-V4.1 config (use --layers)");
    std::sort(kept.begin(), kept.end());
    DI_CHECK(std::adjacent_find(kept.begin(), kept.end()) == kept.end(),
             "synth: --layer-ids lists a layer twice");
    DI_CHECK(kept.front() >= 0 && kept.back() < old_layers, "synth: --layer-ids {} outside [0, {})",
             kept.back() < old_layers ? kept.front() : kept.back(), old_layers);
  }
  const auto layers = static_cast<int64_t>(kept.size());
  DI_CHECK(draft >= 0 && draft <= 8, "synth: --draft-blocks {} outside [0, 8]", draft);
  auto new_id = [&](int64_t old) -> int64_t {  // -1: not kept
    auto it = std::lower_bound(kept.begin(), kept.end(), old);
    return it != kept.end() && *it == old ? it - kept.begin() : -1;
  };
  std::vector<int64_t> ratios = t["compress_ratios"].get<std::vector<int64_t>>();
  std::vector<int64_t> new_ratios;
  for (int64_t i : kept)
    new_ratios.push_back(ratios.at(static_cast<size_t>(i)));
  for (int64_t d = 0; d < draft; ++d) {
    const auto src = static_cast<size_t>(old_layers + d);
    new_ratios.push_back(src < ratios.size() ? ratios[src] : 0);
  }
  // A kept layer that reads compressed KV, top-k or the candidate pool keeps its source, as the
  // full model's layer plan binds it.
  const int64_t cand = t.value("candidate_source_layer_id", int64_t{-1});
  if (!opt.layer_ids.empty()) {
    const std::vector<LayerPlan> plan = build_layer_plan(parse_model_config(cfg.dump(), "synth"));
    for (int64_t i : kept) {
      const LayerPlan& p = plan.at(static_cast<size_t>(i));
      for (const auto& [what, src] :
           {std::pair{"kv source", p.kv_source}, std::pair{"index source", p.index_source}}) {
        DI_CHECK(src < 0 || new_id(src) >= 0,
                 "synth: --layer-ids keeps layer {} but not its {} (layer {})", i, what, src);
      }
      DI_CHECK(!p.candidate_reader || new_id(cand) >= 0,
               "synth: --layer-ids keeps layer {} but not the candidate source (layer {})", i,
               cand);
    }
  }
  auto remap = [&](const std::vector<int64_t>& ids) {
    std::vector<int64_t> out;
    for (int64_t id : ids) {
      if (new_id(id) >= 0) out.push_back(new_id(id));
    }
    return out;
  };
  t["num_hidden_layers"] = layers;
  t["num_nextn_predict_layers"] = draft;
  t["compress_ratios"] = new_ratios;
  for (const char* key : {"kv_source_layer_ids", "index_source_layer_ids"}) {
    if (t.contains(key)) t[key] = remap(t[key].get<std::vector<int64_t>>());
  }
  if (t.contains("candidate_source_layer_id"))
    t["candidate_source_layer_id"] = cand >= 0 ? new_id(cand) : -1;
  if (t.contains("engram_layer_ids")) {
    auto ids = t["engram_layer_ids"].get<std::vector<int64_t>>();
    auto rows = t["engram_num_embeddings"].get<std::vector<int64_t>>();
    std::vector<int64_t> keep_ids, keep_rows;
    for (size_t i = 0; i < ids.size() && i < rows.size(); ++i) {
      if (new_id(ids[i]) >= 0) {
        keep_ids.push_back(new_id(ids[i]));
        keep_rows.push_back(rows[i]);
      }
    }
    t["engram_layer_ids"] = keep_ids;
    t["engram_num_embeddings"] = keep_rows;
  }
  if (t.contains("dspark_target_layer_ids")) {
    auto taps = t["dspark_target_layer_ids"].get<std::vector<int64_t>>();
    std::vector<int64_t> kept_taps = remap(taps);
    if (kept_taps.size() != taps.size()) {  // taps not kept: the last layers instead
      const int64_t k = std::min<int64_t>(static_cast<int64_t>(taps.size()), layers);
      kept_taps.clear();
      for (int64_t i = 0; i < k; ++i)
        kept_taps.push_back(layers - k + i);
    }
    t["dspark_target_layer_ids"] = kept_taps;
  }
  if (t.contains("num_hash_layers")) {
    t["num_hash_layers"] = std::min(t["num_hash_layers"].get<int64_t>(), layers);
  }
  if (opt.experts) {
    const int64_t e = *opt.experts;
    DI_CHECK(e >= 1, "synth: --experts must be >= 1");
    const int64_t old_e = t["n_routed_experts"].get<int64_t>();
    DI_CHECK(e <= old_e, "synth: --experts {} exceeds the model's {}", e, old_e);
    t["n_routed_experts"] = e;
    t["num_experts_per_tok"] = std::min(t["num_experts_per_tok"].get<int64_t>(), e);
    if (t.contains("dspark_n_routed_experts")) {
      const int64_t de = std::min(t["dspark_n_routed_experts"].get<int64_t>(), e);
      t["dspark_n_routed_experts"] = de;
      t["dspark_num_experts_per_tok"] =
          std::min(t.value("dspark_num_experts_per_tok", int64_t{1}), de);
    }
  }
  if (!opt.vision) cfg.erase("vision_config");
  return cfg;
}

namespace {

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  DI_CHECK(f.good(), "{}: cannot write", p.string());
}

// Shard units, in release order: vision and misc first, embedding, one unit per block, the
// head, then each Engram table apart (the release keeps the tables in their own shards).
std::vector<std::vector<const WeightSpec*>> shard_units(const WeightCatalogue& cat) {
  std::vector<std::vector<const WeightSpec*>> units;
  std::vector<const WeightSpec*> first, head;
  std::vector<std::vector<const WeightSpec*>> blocks(cat.plan().size());
  std::map<int64_t, std::vector<const WeightSpec*>> engram;
  for (const WeightSpec& s : cat.entries()) {
    if (s.group == WeightGroup::kEngram) {
      engram[s.block].push_back(&s);
    } else if (s.block >= 0) {
      blocks[static_cast<size_t>(s.block)].push_back(&s);
    } else if (s.name == "head.weight" || s.name == "norm.weight" ||
               s.name.rfind("hc_head_", 0) == 0) {
      head.push_back(&s);
    } else {
      first.push_back(&s);
    }
  }
  units.push_back(std::move(first));
  const size_t backbone = static_cast<size_t>(std::count_if(
      cat.plan().begin(), cat.plan().end(), [](const LayerPlan& p) { return !p.is_draft(); }));
  for (size_t i = 0; i < backbone; ++i)
    units.push_back(std::move(blocks[i]));
  units.push_back(std::move(head));
  for (size_t i = backbone; i < blocks.size(); ++i)
    units.push_back(std::move(blocks[i]));
  for (auto& [blk, specs] : engram)
    units.push_back(std::move(specs));
  return units;
}

}  // namespace

SynthResult synthesize_checkpoint(const SynthOptions& opt) {
  DI_CHECK(!opt.out.empty(), "synth: --out is required");
  if (fs::exists(opt.out)) {
    DI_CHECK(fs::is_directory(opt.out) && fs::is_empty(opt.out),
             "synth: output {} exists and is not an empty directory", opt.out.string());
  }
  json cfg_json = shrink_config_json(load_config_json(opt.config), opt);
  SynthResult res;
  res.config = parse_model_config(cfg_json.dump(), "synth(" + opt.config + ")");
  const ModelConfig& cfg = res.config;
  const WeightCatalogue cat = build_weight_catalogue(cfg);

  // Partition into shards.
  std::vector<std::vector<const WeightSpec*>> shards;
  uint64_t cur_bytes = 0;
  for (auto& unit : shard_units(cat)) {
    if (unit.empty()) continue;
    const bool engram_unit = unit.front()->group == WeightGroup::kEngram;
    if (engram_unit && !shards.empty() && !shards.back().empty()) {
      shards.emplace_back();
      cur_bytes = 0;
    }
    for (const WeightSpec* s : unit) {
      if (shards.empty() || (cur_bytes > 0 && cur_bytes + s->nbytes() > opt.shard_bytes)) {
        shards.emplace_back();
        cur_bytes = 0;
      }
      shards.back().push_back(s);
      cur_bytes += s->nbytes();
    }
  }

  fs::create_directories(opt.out / "inference");
  SynthTables tables;
  HostBuffer buf(8u << 20);
  json weight_map = json::object();
  const size_t n_shards = shards.size();
  for (size_t si = 0; si < n_shards; ++si) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", si + 1, n_shards);
    std::vector<TensorSpec> specs;
    for (const WeightSpec* s : shards[si])
      specs.push_back({s->name, s->dtype, s->shape});
    SafetensorsWriter w((opt.out / file).string(), specs);
    for (const WeightSpec* s : shards[si]) {
      weight_map[s->name] = file;
      ++res.tensors;
      const uint64_t n = s->nbytes();
      res.payload_bytes += n;
      if (n > opt.max_dense_tensor_bytes) {
        DI_LOG_INFO("synth: {} ({}) written as a sparse hole (all-zero payload)", s->name,
                    dtype_name(s->dtype));
        res.sparse_bytes += n;
        w.skip_rest_of_current();
        continue;
      }
      const int64_t experts =
          s->block >= 0 ? cat.plan().at(static_cast<size_t>(s->block)).n_routed_experts : 0;
      PayloadGenerator gen(*s, opt.seed, tables, experts);
      uint64_t left = n;
      while (left > 0) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        std::span<std::byte> out(buf.data(), chunk);
        gen.fill(out);
        w.write(out);
        left -= chunk;
      }
    }
    w.finish();
  }
  res.shards = n_shards;
  json index;
  index["metadata"] = {{"total_size", res.payload_bytes}};
  index["weight_map"] = weight_map;
  write_text(opt.out / "model.safetensors.index.json", index.dump(2) + "\n");
  write_text(opt.out / "config.json", cfg_json.dump(2) + "\n");
  write_text(opt.out / "inference" / "config.json", to_reference_config_json(cfg).dump(2) + "\n");
  json gen_cfg = {{"bos_token_id", cfg.bos_token_id},
                  {"eos_token_id", cfg.eos_token_id},
                  {"do_sample", true},
                  {"temperature", 1.0},
                  {"top_p", 1.0}};
  write_text(opt.out / "generation_config.json", gen_cfg.dump(2) + "\n");
  return res;
}

}  // namespace di
