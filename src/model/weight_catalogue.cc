#include "model/weight_catalogue.h"

#include "common/check.h"

namespace di {

std::string_view weight_group_name(WeightGroup g) {
  switch (g) {
    case WeightGroup::kAttention:
      return "attention";
    case WeightGroup::kRoutedExperts:
      return "routed_experts";
    case WeightGroup::kSharedExperts:
      return "shared_experts";
    case WeightGroup::kNormsRouter:
      return "norms_hc_router";
    case WeightGroup::kEmbedHead:
      return "embed_head";
    case WeightGroup::kEngram:
      return "engram";
    case WeightGroup::kDraft:
      return "draft";
    case WeightGroup::kVision:
      return "vision";
  }
  return "?";
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Accumulates the specs of one model; knows the storage conventions of the release.
class Builder {
 public:
  explicit Builder(const ModelConfig& cfg) : c_(cfg) {}

  void add(std::string name, DType dt, Shape shape, WeightGroup g, int64_t block = -1,
           int64_t expert = -1) {
    WeightSpec s;
    s.name = std::move(name);
    s.dtype = dt;
    s.shape = std::move(shape);
    s.group = g;
    s.block = block;
    s.expert = expert;
    out.push_back(std::move(s));
  }
  // FP8 e4m3 weight [out, in] + E8M0 scales [ceil(out/bn), ceil(in/bk)].
  void fp8(const std::string& base, int64_t rows, int64_t cols, WeightGroup g, int64_t block,
           int64_t bn, int64_t bk, int64_t expert = -1) {
    add(base + ".weight", DType::kF8E4M3, {rows, cols}, g, block, expert);
    add(base + ".scale", DType::kF8E8M0, {ceil_div(rows, bn), ceil_div(cols, bk)}, g, block,
        expert);
    out.back().is_scale = true;
  }
  void fp8(const std::string& base, int64_t rows, int64_t cols, WeightGroup g, int64_t block) {
    fp8(base, rows, cols, g, block, c_.quant.block_n, c_.quant.block_k);
  }
  // Routed expert matrix [out, in]: FP4 (I8 [out, in/2] + E8M0 [out, in/32]) or block FP8.
  void expert_matrix(const std::string& base, int64_t rows, int64_t cols, int64_t block,
                     int64_t expert) {
    if (c_.quant.expert_dtype == "fp4") {
      add(base + ".weight", DType::kI8, {rows, cols / 2}, WeightGroup::kRoutedExperts, block,
          expert);
      out.back().fp4_packed = true;
      add(base + ".scale", DType::kF8E8M0, {rows, ceil_div(cols, 32)}, WeightGroup::kRoutedExperts,
          block, expert);
      out.back().is_scale = true;
    } else {
      fp8(base, rows, cols, WeightGroup::kRoutedExperts, block, c_.quant.block_n, c_.quant.block_k,
          expert);
    }
  }
  void bf16(const std::string& name, Shape shape, WeightGroup g, int64_t block) {
    add(name, DType::kBF16, std::move(shape), g, block);
  }
  void f32(const std::string& name, Shape shape, WeightGroup g, int64_t block) {
    add(name, DType::kF32, std::move(shape), g, block);
  }

  std::vector<WeightSpec> out;

 private:
  const ModelConfig& c_;
};

void add_block_common(Builder& b, const ModelConfig& c, const LayerPlan& p) {
  const std::string& P = p.prefix;
  const int64_t D = c.hidden_size;
  const int64_t blk = p.index;
  const WeightGroup norms = p.is_draft() ? WeightGroup::kDraft : WeightGroup::kNormsRouter;
  const WeightGroup attn = p.is_draft() ? WeightGroup::kDraft : WeightGroup::kAttention;
  const WeightGroup shared = p.is_draft() ? WeightGroup::kDraft : WeightGroup::kSharedExperts;
  const int64_t mix = (2 + c.hc_mult) * c.hc_mult;

  b.bf16(P + "attn_norm.weight", {D}, attn, blk);
  b.bf16(P + "ffn_norm.weight", {D}, norms, blk);
  for (const char* sub : {"attn", "ffn"}) {
    b.f32(P + "hc_" + sub + "_fn", {mix, c.hc_mult * D}, norms, blk);
    b.f32(P + "hc_" + sub + "_base", {mix}, norms, blk);
    b.f32(P + "hc_" + sub + "_scale", {3}, norms, blk);
  }

  // Attention core (every block).
  const int64_t H = c.num_heads, hd = c.head_dim;
  b.fp8(P + "attn.wq_a", c.q_lora_rank, D, attn, blk);
  b.bf16(P + "attn.q_norm.weight", {c.q_lora_rank}, attn, blk);
  b.fp8(P + "attn.wq_b", H * hd, c.q_lora_rank, attn, blk);
  b.fp8(P + "attn.wkv", hd, D, attn, blk);
  b.bf16(P + "attn.kv_norm.weight", {hd}, attn, blk);
  b.fp8(P + "attn.wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups, attn, blk);
  b.fp8(P + "attn.wo_b", D, c.o_groups * c.o_lora_rank, attn, blk);
  b.f32(P + "attn.attn_sink", {H}, attn, blk);

  // Router.
  const int64_t E = p.n_routed_experts;
  b.bf16(P + "ffn.gate.weight", {E, D}, norms, blk);
  if (p.hash_routed) {
    b.add(P + "ffn.gate.tid2eid", DType::kI64, {c.vocab_size, p.num_experts_per_tok}, norms, blk);
  } else {
    b.f32(P + "ffn.gate.bias", {E}, norms, blk);
  }
  if (c.is_v41()) b.f32(P + "ffn.gate.bias_vl", {E}, norms, blk);

  // Experts.
  const int64_t I = c.moe_intermediate_size;
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = P + "ffn.experts." + std::to_string(e) + ".";
    b.expert_matrix(ep + "w1", I, D, blk, e);
    b.expert_matrix(ep + "w2", D, I, blk, e);
    b.expert_matrix(ep + "w3", I, D, blk, e);
  }
  if (c.n_shared_experts > 0) {
    const int64_t Is = I * c.n_shared_experts;
    b.fp8(P + "ffn.shared_experts.w1", Is, D, shared, blk);
    b.fp8(P + "ffn.shared_experts.w2", D, Is, shared, blk);
    b.fp8(P + "ffn.shared_experts.w3", Is, D, shared, blk);
  }
}

void add_v41_attention_extras(Builder& b, const ModelConfig& c, const LayerPlan& p) {
  const std::string& P = p.prefix;
  const int64_t D = c.hidden_size, hd = c.head_dim, blk = p.index;
  const auto g = WeightGroup::kAttention;
  if (p.mode == AttnMode::kFull) {
    b.bf16(P + "attn.compressor.wkv.weight", {hd, D}, g, blk);
    if (p.compress_ratio > 1) b.bf16(P + "attn.compressor.wgate.weight", {hd, D}, g, blk);
    b.bf16(P + "attn.compressor.norm.weight", {hd}, g, blk);
    b.bf16(P + "attn.indexer.wk.weight", {c.index_head_dim, hd}, g, blk);
    b.bf16(P + "attn.indexer.k_norm.weight", {c.index_head_dim}, g, blk);
  }
  if (p.mode == AttnMode::kFull || p.mode == AttnMode::kReindex) {
    b.bf16(P + "attn.indexer.weights_proj.weight", {c.index_n_heads, D}, g, blk);
    b.fp8(P + "attn.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank, g, blk);
  }
}

void add_v41_engram(Builder& b, const ModelConfig& c, const LayerPlan& p) {
  const std::string P = p.prefix + "engram.";
  const auto g = WeightGroup::kEngram;
  const int64_t rows = c.engram_num_embeddings.at(static_cast<size_t>(p.engram_slot));
  const int64_t hdim = c.engram_head_dim;
  b.add(P + "embed.weight", DType::kF8E4M3, {rows, hdim}, g, p.index);
  b.add(P + "embed.scale", DType::kF8E8M0, {rows, ceil_div(hdim, 32)}, g, p.index);
  b.out.back().is_scale = true;
  // wkv maps the concatenated rows of all hash columns to hc_mult keys + one value.
  b.fp8(P + "wkv", (c.hc_mult + 1) * c.hidden_size, c.engram_hash_columns() * hdim, g, p.index);
  b.bf16(P + "q_weight", {c.hc_mult, c.hidden_size}, g, p.index);
  b.bf16(P + "k_weight", {c.hc_mult, c.hidden_size}, g, p.index);
}

void add_v41_draft_extras(Builder& b, const ModelConfig& c, const LayerPlan& p) {
  const std::string& P = p.prefix;
  const int64_t D = c.hidden_size;
  const auto g = WeightGroup::kDraft;
  if (p.draft_stage == 0) {
    b.fp8(P + "main_proj", D, static_cast<int64_t>(c.dspark_target_layer_ids.size()) * D, g,
          p.index);
    b.bf16(P + "main_norm.weight", {D}, g, p.index);
  }
  if (p.draft_stage == c.num_nextn_predict_layers - 1) {
    b.bf16(P + "norm.weight", {D}, g, p.index);
    b.bf16(P + "markov_head.embed.weight", {c.vocab_size, c.dspark_markov_rank}, g, p.index);
    b.bf16(P + "markov_head.head.weight", {c.vocab_size, c.dspark_markov_rank}, g, p.index);
    b.bf16(P + "confidence_head.proj.weight", {1, D + c.dspark_markov_rank}, g, p.index);
  }
}

void add_v41_vision(Builder& b, const ModelConfig& c) {
  const VisionConfig& v = c.vision;
  const auto g = WeightGroup::kVision;
  const int64_t vd = v.hidden_size, D = c.hidden_size;
  b.bf16("vision.patch_embed.proj.weight", {vd, 3 * v.patch_size * v.patch_size}, g, -1);
  b.bf16("vision.patch_embed.proj.bias", {vd}, g, -1);
  for (int64_t i = 0; i < v.num_layers; ++i) {
    const std::string P = "vision.blocks." + std::to_string(i) + ".";
    b.bf16(P + "norm1.weight", {vd}, g, -1);
    b.bf16(P + "norm2.weight", {vd}, g, -1);
    b.bf16(P + "attn.wqkv.weight", {3 * vd, vd}, g, -1);
    b.bf16(P + "attn.wqkv.bias", {3 * vd}, g, -1);
    b.bf16(P + "attn.wo.weight", {vd, vd}, g, -1);
    b.bf16(P + "attn.wo.bias", {vd}, g, -1);
    b.bf16(P + "mlp.w1.weight", {2 * v.intermediate_size, vd}, g, -1);
    b.bf16(P + "mlp.w2.weight", {vd, v.intermediate_size}, g, -1);
  }
  b.bf16("vision.norm.weight", {vd}, g, -1);
  const int64_t r = v.downsample_ratio;
  b.bf16("aligner.w1.weight", {D, vd * r * r}, g, -1);
  b.bf16("aligner.w1.bias", {D}, g, -1);
  b.bf16("aligner.w2.weight", {D, D}, g, -1);
  b.bf16("aligner.w2.bias", {D}, g, -1);
  b.bf16("image_start", {D}, g, -1);
  b.bf16("image_end", {D}, g, -1);
  b.bf16("image_newline", {D}, g, -1);
}

void add_v4_attention_extras(Builder& b, const ModelConfig& c, const LayerPlan& p) {
  const std::string& P = p.prefix;
  const int64_t D = c.hidden_size, hd = c.head_dim, blk = p.index;
  const auto g = WeightGroup::kAttention;
  if (p.mode != AttnMode::kCsa && p.mode != AttnMode::kHca) return;
  // CSA (ratio 4) compresses 2*ratio overlapping tokens: two halves of 512 channels each.
  const int64_t coff = p.mode == AttnMode::kCsa ? 2 : 1;
  b.f32(P + "attn.compressor.ape", {p.compress_ratio, coff * hd}, g, blk);
  b.bf16(P + "attn.compressor.wkv.weight", {coff * hd, D}, g, blk);
  b.bf16(P + "attn.compressor.wgate.weight", {coff * hd, D}, g, blk);
  b.bf16(P + "attn.compressor.norm.weight", {hd}, g, blk);
  if (p.mode == AttnMode::kCsa) {
    const int64_t ihd = c.index_head_dim;
    b.fp8(P + "attn.indexer.wq_b", c.index_n_heads * ihd, c.q_lora_rank, g, blk);
    b.bf16(P + "attn.indexer.weights_proj.weight", {c.index_n_heads, D}, g, blk);
    b.f32(P + "attn.indexer.compressor.ape", {p.compress_ratio, 2 * ihd}, g, blk);
    b.bf16(P + "attn.indexer.compressor.wkv.weight", {2 * ihd, D}, g, blk);
    b.bf16(P + "attn.indexer.compressor.wgate.weight", {2 * ihd, D}, g, blk);
    b.bf16(P + "attn.indexer.compressor.norm.weight", {ihd}, g, blk);
  }
}

void add_v4_mtp_extras(Builder& b, const ModelConfig& c, const LayerPlan& p) {
  const std::string& P = p.prefix;
  const int64_t D = c.hidden_size;
  const auto g = WeightGroup::kDraft;
  b.fp8(P + "e_proj", D, D, g, p.index);
  b.fp8(P + "h_proj", D, D, g, p.index);
  b.bf16(P + "enorm.weight", {D}, g, p.index);
  b.bf16(P + "hnorm.weight", {D}, g, p.index);
  b.bf16(P + "norm.weight", {D}, g, p.index);
  b.f32(P + "hc_head_fn", {c.hc_mult, c.hc_mult * D}, g, p.index);
  b.f32(P + "hc_head_base", {c.hc_mult}, g, p.index);
  b.f32(P + "hc_head_scale", {1}, g, p.index);
}

}  // namespace

WeightCatalogue::WeightCatalogue(const ModelConfig& cfg, std::vector<LayerPlan> plan)
    : plan_(std::move(plan)) {
  Builder b(cfg);
  const int64_t V = cfg.vocab_size, D = cfg.hidden_size;
  b.bf16("embed.weight", {V, D}, WeightGroup::kEmbedHead, -1);
  b.bf16("head.weight", {V, D}, WeightGroup::kEmbedHead, -1);
  b.bf16("norm.weight", {D}, WeightGroup::kEmbedHead, -1);
  if (!cfg.is_v41()) {
    b.f32("hc_head_fn", {cfg.hc_mult, cfg.hc_mult * D}, WeightGroup::kNormsRouter, -1);
    b.f32("hc_head_base", {cfg.hc_mult}, WeightGroup::kNormsRouter, -1);
    b.f32("hc_head_scale", {1}, WeightGroup::kNormsRouter, -1);
  }
  for (const LayerPlan& p : plan_) {
    add_block_common(b, cfg, p);
    if (cfg.is_v41()) {
      add_v41_attention_extras(b, cfg, p);
      if (p.engram_slot >= 0) add_v41_engram(b, cfg, p);
      if (p.is_draft()) add_v41_draft_extras(b, cfg, p);
    } else {
      add_v4_attention_extras(b, cfg, p);
      if (p.is_draft()) add_v4_mtp_extras(b, cfg, p);
    }
  }
  if (cfg.is_v41() && cfg.vision.present) add_v41_vision(b, cfg);
  entries_ = std::move(b.out);
  for (size_t i = 0; i < entries_.size(); ++i) {
    auto [it, inserted] = by_name_.emplace(entries_[i].name, i);
    DI_CHECK(inserted, "weight catalogue lists {} twice", entries_[i].name);
  }
}

const WeightSpec* WeightCatalogue::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

WeightCatalogue::Totals WeightCatalogue::total() const {
  Totals t;
  for (const auto& e : entries_) {
    ++t.tensors;
    t.bytes += e.nbytes();
    t.params += e.params();
  }
  return t;
}

std::array<WeightCatalogue::Totals, kNumWeightGroups> WeightCatalogue::by_group() const {
  std::array<Totals, kNumWeightGroups> out{};
  for (const auto& e : entries_) {
    auto& t = out[static_cast<size_t>(e.group)];
    ++t.tensors;
    t.bytes += e.nbytes();
    t.params += e.params();
  }
  return out;
}

std::map<DType, WeightCatalogue::Totals> WeightCatalogue::by_dtype() const {
  std::map<DType, Totals> out;
  for (const auto& e : entries_) {
    auto& t = out[e.dtype];
    ++t.tensors;
    t.bytes += e.nbytes();
    t.params += e.params();
  }
  return out;
}

std::vector<WeightCatalogue::Totals> WeightCatalogue::by_block() const {
  std::vector<Totals> out(plan_.size());
  for (const auto& e : entries_) {
    if (e.block < 0) continue;
    auto& t = out[static_cast<size_t>(e.block)];
    ++t.tensors;
    t.bytes += e.nbytes();
    t.params += e.params();
  }
  return out;
}

WeightCatalogue build_weight_catalogue(const ModelConfig& cfg) {
  return WeightCatalogue(cfg, build_layer_plan(cfg));
}

}  // namespace di
