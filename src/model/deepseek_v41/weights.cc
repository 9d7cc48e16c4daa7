#include "model/deepseek_v41/weights.h"

#include "common/check.h"
#include "common/logging.h"
#include "core/mapped_file.h"
#include "model/weight_catalogue.h"

namespace di::v41 {
namespace {

template <typename T>
class Binder {
 public:
  Binder(const ModelConfig& cfg, const Checkpoint& ckpt) : cfg_(cfg), ckpt_(ckpt) {}

  ConstTensorView view(const std::string& name) const { return ckpt_.view(name); }
  bool has(const std::string& name) const { return ckpt_.find(name) != nullptr; }

  std::vector<T> vec(const std::string& name) const {
    ConstTensorView v = view(name);
    const auto n = static_cast<int64_t>(v.shape.numel());
    WeightRef r = cpu::dense_weight(ConstTensorView{v.data, v.dtype, Shape{1, n}}, name);
    std::vector<T> out(static_cast<size_t>(n));
    cpu::decode_rows(r, 0, 1, out.data());
    return out;
  }
  WeightRef dense(const std::string& name) const { return cpu::dense_weight(view(name), name); }
  WeightRef fp8(const std::string& base) const {
    return cpu::fp8_block_weight(view(base + ".weight"), view(base + ".scale"),
                                 static_cast<int>(cfg_.quant.block_n),
                                 static_cast<int>(cfg_.quant.block_k), base);
  }
  WeightRef expert(const std::string& base) const {
    if (cfg_.quant.expert_dtype == "fp4") {
      return cpu::fp4_row_weight(view(base + ".weight"), view(base + ".scale"), base);
    }
    return fp8(base);
  }
  HcParams<T> hc(const std::string& p, const char* site) const {
    return {vec(p + "hc_" + site + "_fn"), vec(p + "hc_" + site + "_base"),
            vec(p + "hc_" + site + "_scale")};
  }

 private:
  const ModelConfig& cfg_;
  const Checkpoint& ckpt_;
};

}  // namespace

template <typename T>
ModelWeights<T> bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt) {
  DI_CHECK(cfg.is_v41(), "the CPU forward model supports DeepSeek-V4.1 checkpoints only");
  Binder<T> b(cfg, ckpt);
  ModelWeights<T> m;
  m.embed = b.dense("embed.weight");
  m.head = b.dense("head.weight");
  m.norm = b.vec("norm.weight");
  for (const LayerPlan& p : build_layer_plan(cfg)) {
    const std::string& P = p.prefix;
    BlockWeights<T> w;
    w.plan = p;
    w.attn_norm = b.vec(P + "attn_norm.weight");
    w.ffn_norm = b.vec(P + "ffn_norm.weight");
    w.hc_attn = b.hc(P, "attn");
    w.hc_ffn = b.hc(P, "ffn");
    w.wq_a = b.fp8(P + "attn.wq_a");
    w.q_norm = b.vec(P + "attn.q_norm.weight");
    w.wq_b = b.fp8(P + "attn.wq_b");
    w.wkv = b.fp8(P + "attn.wkv");
    w.kv_norm = b.vec(P + "attn.kv_norm.weight");
    w.wo_a = b.fp8(P + "attn.wo_a");
    w.wo_b = b.fp8(P + "attn.wo_b");
    w.attn_sink = b.vec(P + "attn.attn_sink");
    if (p.mode == AttnMode::kFull) {
      w.comp_wkv = b.dense(P + "attn.compressor.wkv.weight");
      if (p.compress_ratio > 1) w.comp_wgate = b.dense(P + "attn.compressor.wgate.weight");
      w.comp_norm = b.vec(P + "attn.compressor.norm.weight");
      w.idx_wk = b.dense(P + "attn.indexer.wk.weight");
      w.idx_k_norm = b.vec(P + "attn.indexer.k_norm.weight");
    }
    if (p.mode == AttnMode::kFull || p.mode == AttnMode::kReindex) {
      w.idx_wq_b = b.fp8(P + "attn.indexer.wq_b");
      w.idx_weights_proj = b.dense(P + "attn.indexer.weights_proj.weight");
    }
    w.gate = b.dense(P + "ffn.gate.weight");
    w.gate_bias = b.vec(P + "ffn.gate.bias");
    w.gate_bias_vl = b.vec(P + "ffn.gate.bias_vl");
    for (int64_t e = 0; e < p.n_routed_experts; ++e) {
      const std::string E = P + "ffn.experts." + std::to_string(e) + ".";
      w.experts.push_back({b.expert(E + "w1"), b.expert(E + "w2"), b.expert(E + "w3")});
    }
    w.shared = {b.fp8(P + "ffn.shared_experts.w1"), b.fp8(P + "ffn.shared_experts.w2"),
                b.fp8(P + "ffn.shared_experts.w3")};
    if (p.engram_slot >= 0) {
      const std::string E = P + "engram.";
      w.engram_table = cpu::fp8_block_weight(b.view(E + "embed.weight"), b.view(E + "embed.scale"),
                                             1, 32, E + "embed");
      // Rows are read a few at a time at random (the n-gram hashes): no readahead.
      advise_random_access(w.engram_table->weight.bytes());
      advise_random_access(w.engram_table->scale.bytes());
      w.engram_wkv = b.fp8(E + "wkv");
      std::vector<T> q = b.vec(E + "q_weight"), k = b.vec(E + "k_weight");
      w.engram_qk.resize(q.size());
      for (size_t i = 0; i < q.size(); ++i)
        w.engram_qk[i] = q[i] * k[i];
    }
    if (p.is_draft()) {
      if (p.draft_stage == 0) {
        w.main_proj = b.fp8(P + "main_proj");
        w.main_norm = b.vec(P + "main_norm.weight");
      }
      if (p.draft_stage == cfg.num_nextn_predict_layers - 1) {
        w.final_norm = b.vec(P + "norm.weight");
        w.markov_embed = b.dense(P + "markov_head.embed.weight");
        w.markov_head = b.dense(P + "markov_head.head.weight");
        w.confidence_proj = b.dense(P + "confidence_head.proj.weight");
      }
    }
    m.blocks.push_back(std::move(w));
  }
  return m;
}

template ModelWeights<float> bind_weights<float>(const ModelConfig&, const Checkpoint&);
template ModelWeights<double> bind_weights<double>(const ModelConfig&, const Checkpoint&);

bool engram_tables_go_resident(EngramTables mode, uint64_t table_bytes, uint64_t available_bytes) {
  switch (mode) {
    case EngramTables::kResident:
      return true;
    case EngramTables::kMapped:
      return false;
    case EngramTables::kAuto:
      return available_bytes > 0 && table_bytes <= available_bytes / 2;
  }
  return false;
}

template <typename T>
uint64_t place_engram_tables(const ModelWeights<T>& w, EngramTables mode) {
  std::vector<std::span<const std::byte>> ranges;
  uint64_t bytes = 0;
  for (const BlockWeights<T>& b : w.blocks) {
    if (!b.engram_table) continue;
    for (const std::span<const std::byte> r :
         {b.engram_table->weight.bytes(), b.engram_table->scale.bytes()}) {
      ranges.push_back(r);
      bytes += r.size();
    }
  }
  if (ranges.empty()) return 0;
  const uint64_t available = available_memory_bytes();
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // sizes below in GiB, three decimals
  if (!engram_tables_go_resident(mode, bytes, available)) {
    if (mode == EngramTables::kAuto) {
      DI_LOG_INFO(
          "Engram tables ({:.3f} GiB) stay mapped: {:.1f} GiB of memory available (resident "
          "when they fit in half); rows read on cold pages take page faults",
          static_cast<double>(bytes) / kGiB, static_cast<double>(available) / kGiB);
    }
    return 0;
  }
  if (mode == EngramTables::kResident && bytes > available) {
    DI_LOG_WARN("Engram tables ({:.3f} GiB) made resident with {:.1f} GiB of memory available",
                static_cast<double>(bytes) / kGiB, static_cast<double>(available) / kGiB);
  }
  for (const std::span<const std::byte> r : ranges) {
    if (!populate_read(r)) {
      DI_LOG_WARN("Engram tables stay mapped: this kernel has no MADV_POPULATE_READ");
      return 0;
    }
  }
  DI_LOG_INFO("Engram tables resident: {:.3f} GiB", static_cast<double>(bytes) / kGiB);
  return bytes;
}

template uint64_t place_engram_tables<float>(const ModelWeights<float>&, EngramTables);
template uint64_t place_engram_tables<double>(const ModelWeights<double>&, EngramTables);

}  // namespace di::v41
