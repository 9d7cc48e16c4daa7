// DSpark drafting of the V4.1 CPU reference (delta spec §4.2, reference `forward_spec`).

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "kernels/cpu/markov.h"
#include "kernels/cpu/mhc.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/sparse_attn.h"
#include "model/deepseek_v41/model.h"

namespace di::v41 {

template <typename T>
typename Model<T>::Vec Model<T>::main_x_of(const std::vector<double>& main_hidden_row) const {
  const BlockWeights<T>& s0 = w_.blocks[static_cast<size_t>(cfg_.num_layers)];
  DI_CHECK(static_cast<int64_t>(main_hidden_row.size()) == s0.main_proj->cols,
           "dspark: main_hidden row has {} values, main_proj expects {}", main_hidden_row.size(),
           s0.main_proj->cols);
  const Vec mh(main_hidden_row.begin(), main_hidden_row.end());
  Vec x = linear_q(mh, 1, *s0.main_proj);
  norm(x, 1, cfg_.hidden_size, s0.main_norm);
  return x;
}

template <typename T>
void Model<T>::dspark_prefill(SequenceState& state,
                              const std::vector<std::vector<double>>& main_hidden_rows) {
  auto& st = dynamic_cast<SequenceStateT<T>&>(state);
  DI_CHECK(cfg_.num_nextn_predict_layers > 0, "model has no DSpark stages");
  const int64_t hd = cfg_.head_dim, win = cfg_.sliding_window;
  const auto n_rows = static_cast<int64_t>(main_hidden_rows.size());
  // Traced: the ring entries each stage receives, [rows, head_dim] per stage.
  std::vector<Vec> traced_kv(tracing() ? static_cast<size_t>(cfg_.num_nextn_predict_layers) : 0);
  // A ring keeps the newest `win` positions: rows before them are overwritten within this call,
  // so they are computed only when traced (the trace holds every row's entry).
  const int64_t skip = tracing() ? 0 : std::max<int64_t>(0, n_rows - win);
  const int64_t cols = w_.blocks[static_cast<size_t>(cfg_.num_layers)].main_proj->cols;
  for (int64_t k = 0; k < skip; ++k) {
    const size_t got = main_hidden_rows[static_cast<size_t>(k)].size();
    DI_CHECK(static_cast<int64_t>(got) == cols,
             "dspark: main_hidden row {} has {} values, main_proj expects {}", k, got, cols);
  }
  st.draft_tokens += skip;
  for (int64_t k = skip; k < n_rows; ++k) {
    const auto& row = main_hidden_rows[static_cast<size_t>(k)];
    const Vec main_x = main_x_of(row);
    const int64_t pos = st.draft_tokens++;
    for (int64_t s = 0; s < cfg_.num_nextn_predict_layers; ++s) {
      const int64_t b = cfg_.num_layers + s;
      const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(b)];
      const Vec kv = window_kv(w, main_x, 1, pos, rope_for(b));
      if (tracing()) {
        traced_kv[static_cast<size_t>(s)].insert(traced_kv[static_cast<size_t>(s)].end(),
                                                 kv.begin(), kv.end());
      }
      std::copy(kv.begin(), kv.end(),
                st.blocks[static_cast<size_t>(b)].ring.begin() + (pos % win) * hd);
    }
  }
  for (size_t s = 0; s < traced_kv.size(); ++s) {
    trace_block(cfg_.num_layers + static_cast<int64_t>(s), "attn.main_kv", traced_kv[s],
                {n_rows, hd});
  }
}

template <typename T>
typename Model<T>::Vec Model<T>::dspark_attention(int64_t i, SequenceStateT<T>& st, int64_t p,
                                                  const Vec& x, const Vec& main_x) {
  const BlockWeights<T>& w = w_.blocks[static_cast<size_t>(i)];
  BlockState<T>& bs = st.blocks[static_cast<size_t>(i)];
  const int64_t D = cfg_.hidden_size, H = cfg_.num_heads, hd = cfg_.head_dim;
  const int64_t win = cfg_.sliding_window;
  const int64_t rows = static_cast<int64_t>(x.size()) / D;
  const cpu::RopeTable<T>& rope = rope_for(i);
  // main_kv(p) enters the ring: only accepted context is stored, never the draft rows.
  const Vec main_kv = window_kv(w, main_x, 1, p, rope);
  trace_block(i, "attn.main_kv", main_kv, {1, hd});
  // The draft rows sit at positions p+1 .. p+rows.
  Vec qr, q;
  queries(w, x, rows, p + 1, rope, qr, q);
  trace_block(i, "attn.qr", qr, {rows, cfg_.q_lora_rank});
  const Vec kv = window_kv(w, x, rows, p + 1, rope);
  trace_block(i, "attn.q", q, {rows, H, hd});
  trace_block(i, "attn.kv", kv, {rows, hd});
  std::copy(main_kv.begin(), main_kv.end(), bs.ring.begin() + (p % win) * hd);
  Vec entries(bs.ring);
  entries.insert(entries.end(), kv.begin(), kv.end());
  // Every draft row sees the filled ring slots and all draft rows (bidirectional block).
  std::vector<int32_t> one;
  for (int64_t t = 0; t < std::min(win, p + 1); ++t)
    one.push_back(static_cast<int32_t>(t));
  for (int64_t r = 0; r < rows; ++r)
    one.push_back(static_cast<int32_t>(win + r));
  std::vector<int32_t> idx;
  for (int64_t r = 0; r < rows; ++r)
    idx.insert(idx.end(), one.begin(), one.end());
  Vec o(static_cast<size_t>(rows * H * hd));
  cpu::sparse_attention(q.data(), rows, H, hd, entries.data(),
                        static_cast<int64_t>(entries.size()) / hd, w.attn_sink.data(), idx.data(),
                        static_cast<int64_t>(one.size()),
                        static_cast<T>(std::pow(static_cast<double>(hd), -0.5)), o.data(), bf16_);
  return attention_output(i, o, rows, p + 1, rope);
}

template <typename T>
DraftResult Model<T>::dspark_step(SequenceState& state, int64_t input_id,
                                  const std::vector<double>& main_hidden_row) {
  auto& st = dynamic_cast<SequenceStateT<T>&>(state);
  DI_CHECK(cfg_.num_nextn_predict_layers > 0, "model has no DSpark stages");
  DI_CHECK(input_id >= 0 && input_id < cfg_.vocab_size, "dspark: input id {} outside vocabulary",
           input_id);
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, V = cfg_.vocab_size;
  const int64_t bsz = cfg_.dspark_block_size;
  const int64_t p = st.draft_tokens++;  // position of the backbone token just consumed
  const Vec main_x = main_x_of(main_hidden_row);
  trace("dspark.main_x", main_x, {1, D});
  // Block ids [input, noise x (bsz - 1)], embedded with the backbone embedding, 4 copies.
  Vec h(static_cast<size_t>(bsz * hc * D));
  Vec row(static_cast<size_t>(D));
  for (int64_t r = 0; r < bsz; ++r) {
    const int64_t id = r == 0 ? input_id : cfg_.dspark_noise_token_id;
    cpu::decode_rows(w_.embed, id, id + 1, row.data());
    for (int64_t c = 0; c < hc; ++c)
      std::copy(row.begin(), row.end(), h.begin() + (r * hc + c) * D);
  }
  Vec pre_mix(static_cast<size_t>(bsz * hc), T(0));
  for (int64_t r = 0; r < bsz; ++r)
    pre_mix[static_cast<size_t>(r * hc)] = T(1);
  Shared unused;
  for (int64_t s = 0; s < cfg_.num_nextn_predict_layers; ++s) {
    block_forward(cfg_.num_layers + s, st, p, h, pre_mix, unused, &main_x);
  }
  // Head of the last stage: collapse, stage norm, shared LM head, then the Markov loop.
  const BlockWeights<T>& last = w_.blocks.back();
  Vec x(static_cast<size_t>(bsz * D));
  for (int64_t r = 0; r < bsz; ++r) {
    cpu::hc_collapse(h.data() + r * hc * D, hc, D, pre_mix.data() + r * hc, x.data() + r * D);
  }
  rb(x);
  trace("dspark.x", x, {bsz, D});
  // The confidence head reads the collapsed stream before the stage norm.
  Vec xn = x;
  norm(xn, bsz, D, last.final_norm);
  Vec logits = head_logits(xn, bsz);
  const int64_t rank = cfg_.dspark_markov_rank;
  DraftResult res;
  res.draft_ids.resize(static_cast<size_t>(bsz));
  res.logits.resize(static_cast<size_t>(bsz));
  res.confidence.resize(static_cast<size_t>(bsz));
  int64_t prev = input_id;
  Vec m(static_cast<size_t>(rank));
  for (int64_t r = 0; r < bsz; ++r) {
    cpu::decode_rows(*last.markov_embed, prev, prev + 1, m.data());
    const Vec bias = linear(m, 1, *last.markov_head);
    T* lr = logits.data() + r * V;
    const int64_t best = cpu::markov_bias_argmax(lr, bias.data(), V);
    res.draft_ids[static_cast<size_t>(r)] = best;
    res.logits[static_cast<size_t>(r)].assign(lr, lr + V);
    // Confidence: proj([x_r ; m_r]), a raw logit.
    Vec cat(x.begin() + r * D, x.begin() + (r + 1) * D);
    cat.insert(cat.end(), m.begin(), m.end());
    res.confidence[static_cast<size_t>(r)] =
        static_cast<double>(linear(cat, 1, *last.confidence_proj)[0]);
    prev = best;
  }
  trace("dspark.logits", logits, {bsz, V});
  if (tracing()) {
    tracer_->record_ids("dspark.draft_ids", res.draft_ids, {bsz});
    tracer_->record("dspark.confidence", res.confidence, {bsz});
  }
  return res;
}

#define DI_INSTANTIATE(T)                                                                          \
  template Model<T>::Vec Model<T>::main_x_of(const std::vector<double>&) const;                    \
  template void Model<T>::dspark_prefill(SequenceState&, const std::vector<std::vector<double>>&); \
  template Model<T>::Vec Model<T>::dspark_attention(int64_t, SequenceStateT<T>&, int64_t,          \
                                                    const Vec&, const Vec&);                       \
  template DraftResult Model<T>::dspark_step(SequenceState&, int64_t, const std::vector<double>&);
DI_INSTANTIATE(float)
DI_INSTANTIATE(double)
#undef DI_INSTANTIATE

}  // namespace di::v41
