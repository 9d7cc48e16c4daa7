// CSA2 attention of the V4.1 CPU reference: window ring, compressor, indexer with the candidate
// pool, shared compressed KV, sparse attention with sink, grouped output projection.

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/sparse_attn.h"
#include "model/deepseek_v41/model.h"

namespace di::v41 {

template <typename T>
void Model<T>::compress(int64_t i, SequenceStateT<T>& st, int64_t start, const Vec& x, Vec& latents,
                        std::vector<int64_t>& groups) {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  BlockState<T>& bs = st.blocks[static_cast<size_t>(i)];
  const int64_t D = cfg_.hidden_size, hd = cfg_.head_dim;
  const int64_t ratio = w.plan.compress_ratio;
  const int64_t rows = static_cast<int64_t>(x.size()) / D;
  // No activation quant: ratio 1 has bf16 weights (an activation out), ratio > 1 pools in fp32.
  if (ratio == 1) {
    latents = linear_act(x, rows, *w.comp_wkv);
    norm(latents, rows, hd, w.comp_norm);
    for (int64_t r = 0; r < rows; ++r)
      groups.push_back(start + r);
    return;
  }
  const Vec kv = linear(x, rows, *w.comp_wkv);
  const Vec score = linear(x, rows, *w.comp_wgate);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = start + r;
    const int64_t slot = pos % ratio;
    std::copy_n(kv.begin() + r * hd, hd, bs.tail_kv.begin() + slot * hd);
    std::copy_n(score.begin() + r * hd, hd, bs.tail_score.begin() + slot * hd);
    if ((pos + 1) % ratio != 0) continue;
    // Group complete: per-channel softmax over its `ratio` tokens, weighted sum of their kv.
    Vec latent(static_cast<size_t>(hd));
    for (int64_t d = 0; d < hd; ++d) {
      T mx = -INFINITY;
      for (int64_t s = 0; s < ratio; ++s)
        mx = std::max(mx, bs.tail_score[static_cast<size_t>(s * hd + d)]);
      T den = 0;
      for (int64_t s = 0; s < ratio; ++s)
        den += std::exp(bs.tail_score[static_cast<size_t>(s * hd + d)] - mx);
      T acc = 0;
      for (int64_t s = 0; s < ratio; ++s) {
        const T p = std::exp(bs.tail_score[static_cast<size_t>(s * hd + d)] - mx) / den;
        acc += bs.tail_kv[static_cast<size_t>(s * hd + d)] * p;
      }
      latent[static_cast<size_t>(d)] = acc;
    }
    rb(latent);  // kv.to(dtype) before the norm
    norm(latent, 1, hd, w.comp_norm);
    latents.insert(latents.end(), latent.begin(), latent.end());
    groups.push_back(pos / ratio);
  }
}

template <typename T>
std::vector<std::vector<int32_t>> Model<T>::indexer(int64_t i, SequenceStateT<T>& st, int64_t start,
                                                    int64_t rows, const Vec& x, const Vec& qr,
                                                    Shared& shared) {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  const LayerPlan& p = w.plan;
  const int64_t ratio = p.compress_ratio;
  const int64_t IH = cfg_.index_n_heads, IHD = cfg_.index_head_dim, rd = cfg_.rope_head_dim;
  const int64_t end_pos = start + rows;
  const int64_t visible_total = end_pos / ratio;
  const cpu::RopeTable<T>& rope = rope_for(i);

  // Queries: FP8 GEMM from qr, RoPE on the tail, FP4 (UE8M0, 32) simulation.
  Vec q = linear_q(qr, rows, *w.idx_wq_b);  // [rows, IH * IHD]
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t hh = 0; hh < IH; ++hh) {
      rope.apply(q.data() + (r * IH + hh) * IHD + (IHD - rd), start + r);
    }
  }
  rb(q);
  for (int64_t r = 0; r < rows; ++r)
    cpu::fp4_quant_ue8m0(std::span<T>(q.data() + r * IH * IHD, static_cast<size_t>(IH * IHD)), 32);
  trace_block(i, "index.q", q, {rows, IH, IHD});
  Vec weights = linear_act(x, rows, *w.idx_weights_proj);  // [rows, IH]
  const T wscale = static_cast<T>(std::pow(static_cast<double>(IHD), -0.5) *
                                  std::pow(static_cast<double>(IH), -0.5));
  for (T& v : weights)
    v = v * wscale;
  rb(weights);
  trace_block(i, "index.weights", weights, {rows, IH});

  // Whose keys: the owner's own (intended) or the last published slot (shipped quirk).
  int64_t key_owner = p.kv_source;
  if (opts_.quirk == IndexKeyQuirk::kShipped && st.last_index_publisher >= 0) {
    key_owner = st.last_index_publisher;
  }
  const BlockState<T>& ks = st.blocks[static_cast<size_t>(key_owner)];
  const int64_t nkeys = static_cast<int64_t>(ks.index_keys.size()) / IHD;
  DI_CHECK(nkeys >= visible_total, "layer {}: {} index keys for {} visible positions", i, nkeys,
           visible_total);

  std::vector<std::vector<int32_t>> out(static_cast<size_t>(rows));
  Vec score(static_cast<size_t>(visible_total));
  Vec traced_scores;                       // [rows, visible_total]
  std::vector<int64_t> traced_topk;        // [rows, min(index_topk, visible_total)]
  std::vector<int64_t> traced_candidates;  // [rows, visible_total], candidate builders
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t visible = (start + r + 1) / ratio;  // group j visible iff j < (pos+1)/ratio
    cpu::indexer_score(q.data() + r * IH * IHD, weights.data() + r * IH, ks.index_keys.data(),
                       visible_total, visible, IH, IHD, score.data(), bf16_);
    if (p.candidate_builder) {
      // Level one: keep the best `candidate_topk_blocks` blocks (block score = max over its
      // positions; the block holding the newest visible position pinned to +inf).
      std::vector<uint8_t> mask(static_cast<size_t>(visible_total), 0);
      cpu::candidate_pool(score.data(), visible_total, visible, cfg_.candidate_block_size,
                          cfg_.candidate_topk_blocks, mask.data());
      if (tracing()) traced_candidates.insert(traced_candidates.end(), mask.begin(), mask.end());
      shared.candidates.push_back(std::move(mask));
    } else if (p.candidate_reader) {
      const auto& mask = shared.candidates.at(static_cast<size_t>(r));
      cpu::apply_candidate_mask(score.data(), visible_total, mask.data(),
                                static_cast<int64_t>(mask.size()));
    }
    if (tracing()) traced_scores.insert(traced_scores.end(), score.begin(), score.end());
    // Top-k among the reachable positions (lower position wins ties), re-sorted by position.
    std::vector<int32_t> sel =
        cpu::select_topk(score.data(), visible_total, visible, cfg_.index_topk);
    if (tracing()) traced_topk.insert(traced_topk.end(), sel.begin(), sel.end());
    out[static_cast<size_t>(r)] = std::move(sel);
  }
  trace_block(i, "index.score", traced_scores, {rows, visible_total});
  if (p.candidate_builder) {
    trace_block_ids(i, "index.candidates", traced_candidates, {rows, visible_total});
  }
  trace_block_ids(i, "index.topk", traced_topk, {rows, std::min(cfg_.index_topk, visible_total)});
  return out;
}

template <typename T>
typename Model<T>::Vec Model<T>::attention(int64_t i, SequenceStateT<T>& st, int64_t start,
                                           const Vec& x, Shared& shared) {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  const LayerPlan& p = w.plan;
  BlockState<T>& bs = st.blocks[static_cast<size_t>(i)];
  const int64_t D = cfg_.hidden_size, H = cfg_.num_heads, hd = cfg_.head_dim;
  const int64_t rd = cfg_.rope_head_dim, win = cfg_.sliding_window;
  const int64_t rows = static_cast<int64_t>(x.size()) / D;
  const cpu::RopeTable<T>& rope = rope_for(i);

  Vec qr, q;  // q: [rows, H, hd]
  queries(w, x, rows, start, rope, qr, q);
  trace_block(i, "attn.qr", qr, {rows, cfg_.q_lora_rank});
  trace_block(i, "attn.q", q, {rows, H, hd});
  const Vec kv = window_kv(w, x, rows, start, rope);
  trace_block(i, "attn.kv", kv, {rows, hd});
  // Entries: [ring (positions before this chunk) ; this chunk's kv ; compressed entries].
  Vec entries(bs.ring);
  entries.insert(entries.end(), kv.begin(), kv.end());
  const int64_t offset = win + rows;
  std::vector<std::vector<int32_t>> idx(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = start + r;
    for (int64_t t = std::max<int64_t>(0, pos - win + 1); t <= pos; ++t) {
      idx[static_cast<size_t>(r)].push_back(
          static_cast<int32_t>(t < start ? t % win : win + (t - start)));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(kv.begin() + r * hd, hd, bs.ring.begin() + ((start + r) % win) * hd);
  }

  if (p.compress_ratio > 0) {
    const int64_t ratio = p.compress_ratio;
    Vec latents;
    std::vector<int64_t> groups;
    if (p.mode == AttnMode::kFull) compress(i, st, start, x, latents, groups);
    const auto emitted = static_cast<int64_t>(groups.size());
    if (emitted > 0) trace_block(i, "compress.latent", latents, {emitted, hd});
    const int64_t compress_len = (start + rows) / ratio;
    // Index keys from the fresh latents (pre-RoPE), published before this layer's indexer.
    if (p.mode == AttnMode::kFull && !groups.empty()) {
      const int64_t IHD = cfg_.index_head_dim;
      Vec k = linear_act(latents, emitted, *w.idx_wk);
      norm(k, emitted, IHD, w.idx_k_norm);
      for (size_t g = 0; g < groups.size(); ++g)
        rope.apply(k.data() + static_cast<int64_t>(g) * IHD + (IHD - rd), groups[g] * ratio);
      rb(k);
      for (size_t g = 0; g < groups.size(); ++g) {
        cpu::fp4_quant_ue8m0(
            std::span<T>(k.data() + static_cast<int64_t>(g) * IHD, static_cast<size_t>(IHD)), 32);
      }
      trace_block(i, "index.k", k, {emitted, IHD});
      bs.index_keys.insert(bs.index_keys.end(), k.begin(), k.end());
      st.last_index_publisher = i;
    }
    if (p.mode == AttnMode::kFull || p.mode == AttnMode::kReindex) {
      if (compress_len == 0) {
        shared.topk.assign(static_cast<size_t>(rows), {});
      } else {
        shared.topk = indexer(i, st, start, rows, x, qr, shared);
      }
    }
    // Compressed KV: RoPE at the group's first position, FP4 with E4M3 scales per 16.
    if (!groups.empty()) {
      for (size_t g = 0; g < groups.size(); ++g)
        rope.apply(latents.data() + static_cast<int64_t>(g) * hd + (hd - rd), groups[g] * ratio);
      rb(latents);
      for (size_t g = 0; g < groups.size(); ++g) {
        cpu::fp4_quant_e4m3(
            std::span<T>(latents.data() + static_cast<int64_t>(g) * hd, static_cast<size_t>(hd)),
            16);
      }
      trace_block(i, "compress.kv", latents, {emitted, hd});
      bs.comp_kv.insert(bs.comp_kv.end(), latents.begin(), latents.end());
    }
    const BlockState<T>& src = st.blocks[static_cast<size_t>(p.kv_source)];
    DI_CHECK(static_cast<int64_t>(src.comp_kv.size()) >= compress_len * hd,
             "layer {}: kv source {} holds fewer than {} entries", i, p.kv_source, compress_len);
    entries.insert(entries.end(), src.comp_kv.begin(), src.comp_kv.begin() + compress_len * hd);
    DI_CHECK(shared.topk.size() == static_cast<size_t>(rows), "layer {}: no top-k from source", i);
    for (int64_t r = 0; r < rows; ++r) {
      for (int32_t t : shared.topk[static_cast<size_t>(r)]) {
        if (t >= 0) idx[static_cast<size_t>(r)].push_back(static_cast<int32_t>(t + offset));
      }
    }
  }
  // Sparse attention over the listed entries.
  size_t topk = 0;
  for (const auto& v : idx)
    topk = std::max(topk, v.size());
  std::vector<int32_t> flat(static_cast<size_t>(rows) * topk, -1);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(idx[static_cast<size_t>(r)].begin(), idx[static_cast<size_t>(r)].end(),
              flat.begin() + r * static_cast<int64_t>(topk));
  }
  Vec o(static_cast<size_t>(rows * H * hd));
  const int64_t n_entries = static_cast<int64_t>(entries.size()) / hd;
  cpu::sparse_attention(q.data(), rows, H, hd, entries.data(), n_entries, w.attn_sink.data(),
                        flat.data(), static_cast<int64_t>(topk),
                        static_cast<T>(std::pow(static_cast<double>(hd), -0.5)), o.data(), bf16_);
  return attention_output(i, o, rows, start, rope);
}

template <typename T>
void Model<T>::queries(const BlockWeights<T>& w, const Vec& x, int64_t rows, int64_t first_pos,
                       const cpu::RopeTable<T>& rope, Vec& qr, Vec& q) const {
  const int64_t H = cfg_.num_heads, hd = cfg_.head_dim, rd = cfg_.rope_head_dim;
  qr = linear_q(x, rows, w.wq_a);
  norm(qr, rows, cfg_.q_lora_rank, w.q_norm);
  q = linear_q(qr, rows, w.wq_b);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t hh = 0; hh < H; ++hh)
      rope.apply(q.data() + (r * H + hh) * hd + (hd - rd), first_pos + r);
  }
  rb(q);
}

template <typename T>
typename Model<T>::Vec Model<T>::window_kv(const BlockWeights<T>& w, const Vec& x, int64_t rows,
                                           int64_t first_pos, const cpu::RopeTable<T>& rope) const {
  const int64_t hd = cfg_.head_dim, rd = cfg_.rope_head_dim;
  Vec kv = linear_q(x, rows, w.wkv);
  norm(kv, rows, hd, w.kv_norm);
  for (int64_t r = 0; r < rows; ++r)
    rope.apply(kv.data() + r * hd + (hd - rd), first_pos + r);
  rb(kv);
  for (int64_t r = 0; r < rows; ++r)
    cpu::act_quant_e4m3(std::span<T>(kv.data() + r * hd, static_cast<size_t>(hd)), kActBlock);
  return kv;
}

template <typename T>
typename Model<T>::Vec Model<T>::attention_output(int64_t i, Vec& o, int64_t rows,
                                                  int64_t first_pos,
                                                  const cpu::RopeTable<T>& rope) const {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  const int64_t H = cfg_.num_heads, hd = cfg_.head_dim, rd = cfg_.rope_head_dim;
  rb(o);  // sparse_attn's output
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t hh = 0; hh < H; ++hh)
      rope.apply(o.data() + (r * H + hh) * hd + (hd - rd), first_pos + r, true);
  }
  rb(o);
  trace_block(i, "attn.o", o, {rows, H, hd});
  // Grouped low-rank output: group g projects its heads with wo_a rows [g*o_lora, (g+1)*o_lora).
  const int64_t G = cfg_.o_groups, R = cfg_.o_lora_rank, gw = H * hd / G;
  Vec z(static_cast<size_t>(rows * G * R));
  for (int64_t g = 0; g < G; ++g) {
    Vec og(static_cast<size_t>(rows * gw));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(o.begin() + r * H * hd + g * gw, gw, og.begin() + r * gw);
    }
    const Vec zg = linear_act(og, rows, w.wo_a.slice_rows(g * R, (g + 1) * R));
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(zg.begin() + r * R, R, z.begin() + (r * G + g) * R);
  }
  return linear_q(z, rows, w.wo_b);
}

#define DI_INSTANTIATE(T)                                                                          \
  template void Model<T>::compress(int64_t, SequenceStateT<T>&, int64_t, const Vec&, Vec&,         \
                                   std::vector<int64_t>&);                                         \
  template std::vector<std::vector<int32_t>> Model<T>::indexer(                                    \
      int64_t, SequenceStateT<T>&, int64_t, int64_t, const Vec&, const Vec&, Shared&);             \
  template Model<T>::Vec Model<T>::attention(int64_t, SequenceStateT<T>&, int64_t, const Vec&,     \
                                             Shared&);                                             \
  template void Model<T>::queries(const BlockWeights<T>&, const Vec&, int64_t, int64_t,            \
                                  const cpu::RopeTable<T>&, Vec&, Vec&) const;                     \
  template Model<T>::Vec Model<T>::window_kv(const BlockWeights<T>&, const Vec&, int64_t, int64_t, \
                                             const cpu::RopeTable<T>&) const;                      \
  template Model<T>::Vec Model<T>::attention_output(int64_t, Vec&, int64_t, int64_t,               \
                                                    const cpu::RopeTable<T>&) const;
DI_INSTANTIATE(float)
DI_INSTANTIATE(double)
#undef DI_INSTANTIATE

}  // namespace di::v41
