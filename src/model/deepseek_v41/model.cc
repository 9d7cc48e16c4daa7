#include "model/deepseek_v41/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/check.h"
#include "kernels/cpu/engram.h"
#include "kernels/cpu/mhc.h"
#include "kernels/cpu/moe_gate.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"

namespace di::v41 {

cpu::RopeParams rope_params(const ModelConfig& c, bool compressed) {
  cpu::RopeParams p;
  p.rope_dim = c.rope_head_dim;
  if (compressed) {
    p.base = c.compress_rope_theta;
    p.original_seq_len = c.rope_scaling.original_max_position_embeddings;
    p.factor = c.rope_scaling.factor;
    p.beta_fast = c.rope_scaling.beta_fast;
    p.beta_slow = c.rope_scaling.beta_slow;
  } else {
    p.base = c.rope_theta;
  }
  return p;
}

template <typename T>
Model<T>::Model(std::shared_ptr<const Checkpoint> ckpt, ModelConfig cfg, ForwardOptions opts,
                std::optional<CompressedTokenMap> token_map)
    : ckpt_(std::move(ckpt)),
      cfg_(std::move(cfg)),
      opts_(opts),
      bf16_(opts.precision == Precision::kBf16),
      w_(bind_weights<T>(cfg_, *ckpt_)),
      token_map_(std::move(token_map)),
      rope_plain_(rope_params(cfg_, false)),
      rope_compressed_(rope_params(cfg_, true)) {
  DI_CHECK(cfg_.hc_mult <= 8, "hc_mult {} > 8 is not supported", cfg_.hc_mult);
  DI_CHECK(!bf16_ || (std::is_same_v<T, float>), "the bf16 precision runs on the float model");
  if (!cfg_.engram_layer_ids.empty()) {
    DI_CHECK(token_map_.has_value(),
             "{}: the model has Engram layers but no compressed token map was found "
             "(engram_token_map.safetensors)",
             cfg_.source);
    engram_params_ = make_engram_hash_params(cfg_, *token_map_);
    place_engram_tables(w_, opts_.engram_tables);
  }
}

template <typename T>
const cpu::RopeTable<T>& Model<T>::rope_for(int64_t block) const {
  return cfg_.compress_ratios[static_cast<size_t>(block)] > 0 ? rope_compressed_ : rope_plain_;
}

template <typename T>
std::string Model<T>::block_name(int64_t block, std::string_view name) const {
  return block < cfg_.num_layers ? fmt::format("layer.{}.{}", block, name)
                                 : fmt::format("dspark.layer.{}.{}", block - cfg_.num_layers, name);
}

template <typename T>
void Model<T>::emit(const std::string& name, std::span<const T> values,
                    std::initializer_list<int64_t> shape) const {
  if constexpr (std::is_same_v<T, double>) {
    tracer_->record(name, values, shape);
  } else {
    const std::vector<double> wide(values.begin(), values.end());
    tracer_->record(name, wide, shape);
  }
}

template <typename T>
std::unique_ptr<SequenceState> Model<T>::new_sequence() const {
  auto st = std::make_unique<SequenceStateT<T>>();
  const int64_t hd = cfg_.head_dim;
  st->blocks.resize(w_.blocks.size());
  for (size_t i = 0; i < w_.blocks.size(); ++i) {
    const LayerPlan& p = w_.blocks[i].plan;
    BlockState<T>& b = st->blocks[i];
    b.ring.assign(static_cast<size_t>(cfg_.sliding_window * hd), T(0));
    if (p.mode == AttnMode::kFull && p.compress_ratio > 1) {
      b.tail_kv.assign(static_cast<size_t>(p.compress_ratio * hd), T(0));
      b.tail_score.assign(static_cast<size_t>(p.compress_ratio * hd), -INFINITY);
    }
  }
  st->engram = EngramHistory{};
  return st;
}

template <typename T>
typename Model<T>::Vec Model<T>::linear(const Vec& x, int64_t rows, const WeightRef& w) const {
  DI_CHECK(static_cast<int64_t>(x.size()) == rows * w.cols,
           "linear: input has {} values, "
           "expected {} x {}",
           x.size(), rows, w.cols);
  Vec y(static_cast<size_t>(rows * w.rows));
  cpu::linear(x.data(), rows, w, y.data());
  return y;
}

template <typename T>
typename Model<T>::Vec Model<T>::linear_q(const Vec& x, int64_t rows, const WeightRef& w) const {
  Vec xq = x;
  // Blocks run along each row's K dimension; rows are multiples of the block for V4.1 shapes.
  for (int64_t r = 0; r < rows; ++r) {
    cpu::act_quant_e4m3(std::span<T>(xq.data() + r * w.cols, static_cast<size_t>(w.cols)),
                        kActBlock);
  }
  Vec y = linear(xq, rows, w);
  rb(y);
  return y;
}

template <typename T>
typename Model<T>::Vec Model<T>::linear_act(const Vec& x, int64_t rows, const WeightRef& w) const {
  Vec y = linear(x, rows, w);
  rb(y);
  return y;
}

template <typename T>
void Model<T>::norm(Vec& x, int64_t rows, int64_t dim, const Vec& weight) const {
  cpu::rms_norm(x.data(), rows, dim, weight.data(), cfg_.rms_norm_eps);
  rb(x);
}

template <typename T>
typename Model<T>::Vec Model<T>::head_logits(const Vec& x, int64_t rows) const {
  return linear(x, rows, w_.head);
}

template <typename T>
typename Model<T>::Vec Model<T>::expert(const ExpertWeights& w, const Vec& x, const T* weight) {
  const int64_t D = w.w1.cols, inter = w.w1.rows;
  const int64_t rows = static_cast<int64_t>(x.size()) / D;
  const Vec g = linear_q(x, rows, w.w1);
  const Vec u = linear_q(x, rows, w.w3);
  const T limit = static_cast<T>(cfg_.swiglu_limit);
  Vec hmid(static_cast<size_t>(rows * inter));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < inter; ++j) {
      const auto k = static_cast<size_t>(r * inter + j);
      T gj = g[k], uj = u[k];
      if (cfg_.swiglu_limit > 0) {
        uj = std::clamp(uj, -limit, limit);
        gj = std::min(gj, limit);
      }
      T v = gj / (T(1) + std::exp(-gj)) * uj;
      // The routing weight scales the activation before w2 (and its FP8 quantisation).
      if (weight != nullptr) v = weight[r] * v;
      hmid[k] = v;
    }
  }
  rb(hmid);  // x.to(dtype) before w2
  return linear_q(hmid, rows, w.w2);
}

template <typename T>
typename Model<T>::Vec Model<T>::moe(int64_t i, const Vec& x, std::span<const uint8_t> image_mask) {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  const int64_t D = cfg_.hidden_size;
  const int64_t rows = static_cast<int64_t>(x.size()) / D;
  const int64_t E = w.plan.n_routed_experts, K = w.plan.num_experts_per_tok;
  const Vec logits = linear(x, rows, w.gate);
  std::vector<int64_t> ids(static_cast<size_t>(rows * K));
  Vec weights(static_cast<size_t>(rows * K));
  for (int64_t r = 0; r < rows; ++r) {
    // Image-span tokens select with the VL bias (reference Gate, `noaux_tc_for_vl`).
    const bool image = !image_mask.empty() && image_mask[static_cast<size_t>(r)] != 0;
    const T* bias = image ? w.gate_bias_vl.data() : w.gate_bias.data();
    cpu::route_token(logits.data() + r * E, E, bias, K, cfg_.gate_temp, cfg_.norm_topk_prob,
                     cfg_.routed_scaling_factor, ids.data() + r * K, weights.data() + r * K);
  }
  if (tracing()) {
    // The selection scores route_token ranks, recomputed the same way.
    Vec scores(logits.size());
    for (size_t k = 0; k < scores.size(); ++k) {
      const size_t r = k / static_cast<size_t>(E);
      const bool image = !image_mask.empty() && image_mask[r] != 0;
      const auto& bias = image ? w.gate_bias_vl : w.gate_bias;
      scores[k] = std::sqrt(cpu::softplus(logits[k] / static_cast<T>(cfg_.gate_temp))) +
                  bias[k % static_cast<size_t>(E)];
    }
    trace_block(i, "ffn.router.scores", scores, {rows, E});
    trace_block_ids(i, "ffn.router.ids", ids, {rows, K});
    trace_block(i, "ffn.router.weights", weights, {rows, K});
  }
  // Experts in ascending id, each over all of its tokens at once (rows are independent, so
  // this is the per-token arithmetic); every token accumulates its experts in ascending id,
  // then the shared expert, as the reference does.
  Vec y(x.size(), T(0));
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> members;
    Vec xe, we;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < K; ++j) {
        if (ids[static_cast<size_t>(r * K + j)] != e) continue;
        members.push_back(r);
        xe.insert(xe.end(), x.begin() + r * D, x.begin() + (r + 1) * D);
        we.push_back(weights[static_cast<size_t>(r * K + j)]);
      }
    }
    if (members.empty()) continue;
    const Vec out = expert(w.experts[static_cast<size_t>(e)], xe, we.data());
    for (size_t m = 0; m < members.size(); ++m) {
      T* yr = y.data() + members[m] * D;
      for (int64_t d = 0; d < D; ++d)
        yr[d] += out[m * static_cast<size_t>(D) + static_cast<size_t>(d)];
    }
  }
  const Vec shared = expert(w.shared, x, nullptr);
  trace_block(i, "ffn.routed", y, {rows, D});
  trace_block(i, "ffn.shared", shared, {rows, D});
  for (size_t k = 0; k < y.size(); ++k)
    y[k] += shared[k];
  rb(y);  // the float accumulator back to the activation dtype
  return y;
}

template <typename T>
void Model<T>::engram(int64_t i, const std::vector<int64_t>& hashes, int64_t slot, Vec& h,
                      std::span<const uint8_t> image_mask) {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  const int64_t cols = cfg_.engram_hash_columns(), hd = cfg_.engram_head_dim;
  const int64_t layers = static_cast<int64_t>(cfg_.engram_layer_ids.size());
  const int64_t rows = static_cast<int64_t>(h.size()) / (hc * D);
  // Gather + dequantise the hashed rows (exact in bf16), then wkv with activation quant.
  Vec e(static_cast<size_t>(rows * cols * hd));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t row_id = hashes[static_cast<size_t>((r * layers + slot) * cols + c)];
      DI_CHECK(row_id >= 0 && row_id < w.engram_table->rows, "engram row {} outside table of {}",
               row_id, w.engram_table->rows);
      cpu::decode_rows(*w.engram_table, row_id, row_id + 1, e.data() + (r * cols + c) * hd);
    }
  }
  const Vec kv = linear_q(e, rows, *w.engram_wkv);  // [rows, (hc + 1) * D]
  Vec gates;                                        // [rows, hc], traced
  if (tracing()) {
    std::vector<int64_t> ids(static_cast<size_t>(rows * cols));
    Vec value(static_cast<size_t>(rows * D));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(hashes.begin() + (r * layers + slot) * cols, cols, ids.begin() + r * cols);
      std::copy_n(kv.begin() + (r * (hc + 1) + hc) * D, D, value.begin() + r * D);
    }
    trace_block_ids(i, "engram.hash_ids", ids, {rows, cols});
    trace_block(i, "engram.value", value, {rows, D});
    gates.resize(static_cast<size_t>(rows * hc));
  }
  // Gate and mix per (row, hc stream); the GPU op (kernels/cuda/engram) computes the same.
  cpu::engram_gate_mix(
      h.data(), kv.data(), w.engram_qk.data(), rows, hc, D, static_cast<T>(cfg_.rms_norm_eps),
      image_mask.empty() ? nullptr : image_mask.data(), tracing() ? gates.data() : nullptr);
  rb(h);
  trace_block(i, "engram.gate", gates, {rows, hc});
}

template <typename T>
void Model<T>::block_forward(int64_t i, SequenceStateT<T>& st, int64_t start, Vec& h, Vec& pre_mix,
                             Shared& shared, const Vec* draft_main_x) {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  const int64_t rows = static_cast<int64_t>(h.size()) / (hc * D);
  const double eps = cfg_.rms_norm_eps;
  trace_block(i, "in", h, {rows, hc, D});
  Vec attn_pre(static_cast<size_t>(rows * hc)), post(static_cast<size_t>(rows * hc));
  Vec comb(static_cast<size_t>(rows * hc * hc));
  Vec x(static_cast<size_t>(rows * D));
  for (int64_t r = 0; r < rows; ++r) {
    const T* hr = h.data() + r * hc * D;
    cpu::hc_mixes(hr, hc, D, w.hc_attn.fn.data(), w.hc_attn.scale.data(), w.hc_attn.base.data(),
                  eps, cfg_.hc_sinkhorn_iters, cfg_.hc_eps, attn_pre.data() + r * hc,
                  post.data() + r * hc, comb.data() + r * hc * hc);
    cpu::hc_collapse(hr, hc, D, pre_mix.data() + r * hc, x.data() + r * D);
  }
  rb(x);
  trace_block(i, "attn_mix.pre", attn_pre, {rows, hc});
  trace_block(i, "attn_mix.post", post, {rows, hc});
  trace_block(i, "attn_mix.comb", comb, {rows, hc, hc});
  norm(x, rows, D, w.attn_norm);
  trace_block(i, "attn.x", x, {rows, D});
  const Vec a = draft_main_x != nullptr ? dspark_attention(i, st, start, x, *draft_main_x)
                                        : attention(i, st, start, x, shared);
  trace_block(i, "attn.out", a, {rows, D});
  Vec h1(h.size());
  for (int64_t r = 0; r < rows; ++r) {
    cpu::hc_expand(a.data() + r * D, h.data() + r * hc * D, hc, D, post.data() + r * hc,
                   comb.data() + r * hc * hc, h1.data() + r * hc * D);
  }
  rb(h1);
  trace_block(i, "mid", h1, {rows, hc, D});
  Vec ffn_pre(static_cast<size_t>(rows * hc));
  for (int64_t r = 0; r < rows; ++r) {
    const T* hr = h1.data() + r * hc * D;
    cpu::hc_mixes(hr, hc, D, w.hc_ffn.fn.data(), w.hc_ffn.scale.data(), w.hc_ffn.base.data(), eps,
                  cfg_.hc_sinkhorn_iters, cfg_.hc_eps, ffn_pre.data() + r * hc,
                  post.data() + r * hc, comb.data() + r * hc * hc);
    // The FFN input collapses with the attention site's pre-mix (one-sublayer lag, §5.3).
    cpu::hc_collapse(hr, hc, D, attn_pre.data() + r * hc, x.data() + r * D);
  }
  rb(x);
  trace_block(i, "ffn_mix.pre", ffn_pre, {rows, hc});
  trace_block(i, "ffn_mix.post", post, {rows, hc});
  trace_block(i, "ffn_mix.comb", comb, {rows, hc, hc});
  norm(x, rows, D, w.ffn_norm);
  trace_block(i, "ffn.x", x, {rows, D});
  const Vec f = moe(i, x, shared.image_mask);
  trace_block(i, "ffn.out", f, {rows, D});
  for (int64_t r = 0; r < rows; ++r) {
    cpu::hc_expand(f.data() + r * D, h1.data() + r * hc * D, hc, D, post.data() + r * hc,
                   comb.data() + r * hc * hc, h.data() + r * hc * D);
  }
  rb(h);
  trace_block(i, "out", h, {rows, hc, D});
  pre_mix = std::move(ffn_pre);
}

template <typename T>
void Model<T>::forward_chunk(SequenceStateT<T>& st, std::span<const int64_t> ids,
                             std::span<const uint8_t> image_mask, std::vector<double>& logits,
                             std::vector<std::vector<double>>& taps,
                             std::vector<double>* all_logits) {
  const int64_t S = static_cast<int64_t>(ids.size());
  DI_CHECK(S > 0, "forward: empty chunk");
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  const int64_t start = st.tokens;
  for (int64_t id : ids) {
    DI_CHECK(id >= 0 && id < cfg_.vocab_size, "token id {} outside the vocabulary of {}", id,
             cfg_.vocab_size);
  }
  if (tracing()) {
    tracer_->record_ids("input_ids", ids, {S});
    tracer_->record_ids("start_pos", std::span<const int64_t>(&start, 1), {1});
  }
  std::vector<int64_t> hashes;
  DI_CHECK(image_mask.empty() || image_mask.size() == ids.size(),
           "forward: image mask has {} entries for {} tokens", image_mask.size(), ids.size());
  if (engram_params_) {
    hashes = engram_hash_chunk(*engram_params_, *token_map_, ids, image_mask, st.engram);
  }
  Vec h(static_cast<size_t>(S * hc * D));
  Vec row(static_cast<size_t>(D));
  for (int64_t r = 0; r < S; ++r) {
    cpu::decode_rows(w_.embed, ids[static_cast<size_t>(r)], ids[static_cast<size_t>(r)] + 1,
                     row.data());
    for (int64_t c = 0; c < hc; ++c)
      std::copy(row.begin(), row.end(), h.begin() + (r * hc + c) * D);
  }
  Vec pre_mix(static_cast<size_t>(S * hc), T(0));
  for (int64_t r = 0; r < S; ++r)
    pre_mix[static_cast<size_t>(r * hc)] = T(1);
  taps.assign(static_cast<size_t>(S), {});
  Shared shared;
  shared.image_mask = image_mask;
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    const LayerPlan& p = w_.blocks[static_cast<size_t>(i)].plan;
    if (p.engram_slot >= 0) {
      const Vec before = tracing() ? h : Vec();
      engram(i, hashes, p.engram_slot, h, image_mask);
      if (tracing()) {
        Vec delta(h.size());
        for (size_t k = 0; k < h.size(); ++k)
          delta[k] = h[k] - before[k];
        trace_block(i, "engram.delta", delta, {S, hc, D});
      }
    }
    if (std::find(cfg_.dspark_target_layer_ids.begin(), cfg_.dspark_target_layer_ids.end(), i) !=
        cfg_.dspark_target_layer_ids.end()) {
      for (int64_t r = 0; r < S; ++r) {
        for (int64_t d = 0; d < D; ++d) {
          T acc = 0;
          for (int64_t c = 0; c < hc; ++c)
            acc += h[static_cast<size_t>((r * hc + c) * D + d)];
          T mean = acc / static_cast<T>(hc);
          rb(std::span<T>(&mean, 1));  // h.mean(dim=2) of the activation dtype
          taps[static_cast<size_t>(r)].push_back(static_cast<double>(mean));
        }
      }
    }
    block_forward(i, st, start, h, pre_mix, shared, nullptr);
  }
  st.tokens += S;
  if (tracing() && !taps.front().empty()) {
    std::vector<double> flat;
    for (const auto& t : taps)
      flat.insert(flat.end(), t.begin(), t.end());
    tracer_->record("dspark.main_hidden", flat, {S, static_cast<int64_t>(taps.front().size())});
  }
  if (tracing()) {
    // final.x of every row (the head below reads only the last, computed the same way).
    Vec xs(static_cast<size_t>(S * D));
    for (int64_t r = 0; r < S; ++r) {
      cpu::hc_collapse(h.data() + r * hc * D, hc, D, pre_mix.data() + r * hc, xs.data() + r * D);
    }
    rb(xs);
    norm(xs, S, D, w_.norm);
    trace("final.x", xs, {S, D});
  }
  // Final collapse with the last block's FFN pre-mix, norm, head on the last row (on every row
  // when all logits are wanted; rows are independent, so the last row is the same either way).
  const int64_t first = all_logits != nullptr ? 0 : S - 1;
  const int64_t n = S - first;
  Vec x(static_cast<size_t>(n * D));
  for (int64_t r = first; r < S; ++r) {
    cpu::hc_collapse(h.data() + r * hc * D, hc, D, pre_mix.data() + r * hc,
                     x.data() + (r - first) * D);
  }
  rb(x);
  norm(x, n, D, w_.norm);
  const Vec l = head_logits(x, n);
  const auto V = static_cast<size_t>(cfg_.vocab_size);
  trace("final.logits", Vec(l.end() - static_cast<std::ptrdiff_t>(V), l.end()),
        {1, cfg_.vocab_size});
  logits.assign(l.end() - static_cast<std::ptrdiff_t>(V), l.end());
  if (all_logits != nullptr) all_logits->assign(l.begin(), l.end());
}

template <typename T>
ForwardResult Model<T>::forward(std::span<const SequenceChunk> chunks) {
  ForwardResult res;
  res.logits.resize(chunks.size());
  res.main_hidden.resize(chunks.size());
  res.all_logits.resize(chunks.size());
  // Sequences are independent: each runs alone, so its arithmetic never depends on the batch.
  for (size_t c = 0; c < chunks.size(); ++c) {
    auto* st = dynamic_cast<SequenceStateT<T>*>(chunks[c].state);
    DI_CHECK(st != nullptr, "forward: sequence state of another model or precision");
    if (tracing()) tracer_->begin_chunk(c, chunks.size());
    forward_chunk(*st, chunks[c].token_ids, chunks[c].image_mask, res.logits[c], res.main_hidden[c],
                  chunks[c].all_logits ? &res.all_logits[c] : nullptr);
  }
  return res;
}

template class Model<float>;
template class Model<double>;

}  // namespace di::v41
