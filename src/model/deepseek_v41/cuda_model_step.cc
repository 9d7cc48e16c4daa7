// A forward step of the CUDA model (a batched step over every chunk of the call) and one
// backbone or draft-stage block: mHC sites, attention, FFN (cuda_model_impl.h).

#include "model/deepseek_v41/cuda_model_impl.h"

namespace di::v41::gpu {

void CudaModel::forward_step(Step& step, std::span<const SequenceChunk> chunks,
                             ForwardResult& res) {
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  const int64_t B = static_cast<int64_t>(chunks.size());
  DI_CHECK(B > 0, "forward: no chunks");
  DI_CHECK(tracer_ == nullptr || B == 1, "CUDA forward: tracing runs one sequence per forward");
  bool any_image = false;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const SequenceChunk& ch = chunks[c];
    auto* st = dynamic_cast<CudaSeqState*>(ch.state);
    DI_CHECK(st != nullptr, "forward: sequence state of another model or backend");
    DI_CHECK(st->kv == dkv_, "forward: sequence state of another CUDA model");
    const auto S = static_cast<int64_t>(ch.token_ids.size());
    DI_CHECK(S > 0, "forward: empty chunk (chunk {})", c);
    for (int64_t id : ch.token_ids) {
      DI_CHECK(id >= 0 && id < cfg_.vocab_size, "token id {} outside the vocabulary of {}", id,
               cfg_.vocab_size);
    }
    DI_CHECK(ch.image_mask.empty() || ch.image_mask.size() == ch.token_ids.size(),
             "forward: image mask has {} entries for {} tokens", ch.image_mask.size(),
             ch.token_ids.size());
    for (const StepSeq& q : step.seqs) {
      DI_CHECK(q.st != st, "forward: chunks {} and {} continue the same sequence",
               &q - step.seqs.data(), c);
    }
    step.seqs.push_back({st, st->tokens, S, step.rows, ch.token_ids, ch.image_mask});
    step.rows += S;
    any_image = any_image || !ch.image_mask.empty();
  }
  const int64_t R = step.rows;
  DI_CHECK(R <= 65535, "forward: {} tokens in one step (at most 65535)", R);
  // The pinned uploads of the previous step are free once its copies ran (a no-op wait after a
  // completed step; after a step that threw, queued copies may still read them).
  stamp(step_checked_);
  begin_step();
  stamp(step_prev_synced_);
  if (cuda_.start_delay_us > 0) gpu_spin(cuda_.start_delay_us, stream_.get());
  mark_op("(step start)");
  stamp(step_tables_begin_);
  build_tables(step);
  stamp(step_tables_end_);

  // Step inputs per row: position, table batch row, the chunk's first position and first row
  // (the attention's chunk_kv rows); per sequence the end of its chunk.
  std::vector<int64_t> positions, ids, chunk_start, chunk_row0, seq_end;
  std::vector<int32_t> seq;
  std::vector<uint8_t> image;
  std::vector<int64_t> hashes;  // [R, engram layers, columns]
  for (int64_t b = 0; b < B; ++b) {
    const StepSeq& q = step.seqs[static_cast<size_t>(b)];
    for (int64_t r = 0; r < q.rows; ++r) {
      positions.push_back(q.start + r);
      seq.push_back(static_cast<int32_t>(b));
      chunk_start.push_back(q.start);
      chunk_row0.push_back(q.row0);
    }
    ids.insert(ids.end(), q.ids.begin(), q.ids.end());
    seq_end.push_back(q.start + q.rows);
    if (any_image) {
      if (q.image_mask.empty()) {
        image.insert(image.end(), static_cast<size_t>(q.rows), uint8_t{0});
      } else {
        image.insert(image.end(), q.image_mask.begin(), q.image_mask.end());
      }
    }
    if (engram_params_) {
      const std::vector<int64_t> h =
          engram_hash_chunk(*engram_params_, *token_map_, q.ids, q.image_mask, q.st->engram);
      hashes.insert(hashes.end(), h.begin(), h.end());
    }
  }
  // The Engram layers' row gathers start now, on host threads (joined at their layers, or by
  // the futures' destructors when the step throws before them).
  std::vector<EngramRows> engram_rows(static_cast<size_t>(cfg_.num_layers));
  if (engram_params_) {
    for (int64_t i = 0; i < cfg_.num_layers; ++i) {
      if (host_.blocks[static_cast<size_t>(i)].plan.engram_slot >= 0)
        engram_rows[static_cast<size_t>(i)] = start_engram_gather(i, hashes, R);
    }
  }
  upload<int64_t>("positions", positions);
  upload<int32_t>("seq", seq);
  upload<int64_t>("seq_end", seq_end);
  step.seq = std::move(seq);
  step.positions = std::move(positions);
  upload<int64_t>("chunk_start", chunk_start);
  upload<int64_t>("chunk_row0", chunk_row0);
  image_rows_ = any_image;
  if (image_rows_) upload<uint8_t>("image_mask", image);

  embed_rows(ids);

  // DSpark taps (models with draft stages): at each target layer the mean of the hc streams, on
  // the GPU as the collapse with weights 1/4 (exact scaling with hc = 4, so bitwise the CPU's
  // stream-order float sum / 4) into [taps, R, D], read back with the logits.
  const int64_t n_taps = cfg_.num_nextn_predict_layers > 0
                             ? static_cast<int64_t>(cfg_.dspark_target_layer_ids.size())
                             : 0;
  auto* taps_dev = n_taps > 0 ? static_cast<uint8_t*>(act("taps", n_taps * R * D)) : nullptr;
  const auto ab = static_cast<int64_t>(act_bytes());
  const float* quarter =
      n_taps > 0 ? upload<float>("taps.pre", std::vector<float>(static_cast<size_t>(R * hc), 0.25f))
                 : nullptr;
  Shared shared;
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    const LayerPlan& p = host_.blocks[static_cast<size_t>(i)].plan;
    cur_block_ = i;
    mark_block(static_cast<size_t>(i));
    if (p.engram_slot >= 0) engram(i, engram_rows[static_cast<size_t>(i)], R);
    const auto tap =
        std::find(cfg_.dspark_target_layer_ids.begin(), cfg_.dspark_target_layer_ids.end(), i);
    if (n_taps > 0 && tap != cfg_.dspark_target_layer_ids.end()) {
      MhcCollapseParams cp;
      cp.stream = act("h", R * hc * D);
      cp.pre = quarter;
      cp.tokens = R;
      cp.dim = D;
      cp.storage = mhc_storage();
      // Taps are concatenated in layer order (the CPU's), whatever the order of the id list.
      const auto k =
          std::count_if(cfg_.dspark_target_layer_ids.begin(), cfg_.dspark_target_layer_ids.end(),
                        [&](int64_t t) { return t < i; });
      cp.out = taps_dev + k * R * D * ab;
      mhc_collapse(cp, stream_.get());
      after("mhc_collapse (DSpark taps)");
    }
    block_forward(i, step, shared);
  }
  cur_block_ = -1;
  mark_block(static_cast<size_t>(cfg_.num_layers));

  // Final collapse with the last FFN pre-mix, norm, head: the last row of every chunk (every row
  // of the chunks that ask for all logits), into consecutive rows of final.x.
  std::vector<int64_t> out_first(static_cast<size_t>(B)), out_rows(static_cast<size_t>(B));
  int64_t n = 0;
  for (int64_t b = 0; b < B; ++b) {
    const StepSeq& q = step.seqs[static_cast<size_t>(b)];
    out_first[static_cast<size_t>(b)] = n;
    out_rows[static_cast<size_t>(b)] = chunks[static_cast<size_t>(b)].all_logits ? q.rows : 1;
    n += out_rows[static_cast<size_t>(b)];
  }
  auto* fx = static_cast<uint8_t*>(act("final.x", n * D));
  const auto* h = static_cast<const uint8_t*>(act("h", R * hc * D));
  const float* pre = buf<float>("pre_mix", R * hc);
  auto collapse = [&](int64_t row, int64_t count, int64_t out_row) {
    MhcCollapseParams cp;
    cp.stream = h + row * hc * D * ab;
    cp.pre = pre + row * hc;
    cp.tokens = count;
    cp.dim = D;
    cp.storage = mhc_storage();
    cp.out = fx + out_row * D * ab;
    mhc_collapse(cp, stream_.get());
    after("mhc_collapse");
  };
  if (n == R) {
    collapse(0, R, 0);  // every row wanted (decode steps, all-logits chunks): one launch
  } else {
    for (int64_t b = 0; b < B; ++b) {
      const StepSeq& q = step.seqs[static_cast<size_t>(b)];
      const int64_t cnt = out_rows[static_cast<size_t>(b)];
      collapse(q.row0 + q.rows - cnt, cnt, out_first[static_cast<size_t>(b)]);
    }
  }
  norm_rows(fx, fx, n, final_norm_, "rms_norm");
  const int64_t V = cfg_.vocab_size;
  float* dl = buf<float>("logits", n * V);
  gemv_bf16(fx, n, head_, dl);  // fp32 logits (x.float(): bf16 widened exactly)
  // Chunks that come with their sampling are sampled here, on the logits where they are, and only
  // their tokens (and logprobs) come back; not while a tracer records the logits.
  std::vector<bool> sampled(static_cast<size_t>(B), false);
  if (tracer_ == nullptr) {
    std::vector<int64_t> last_row(static_cast<size_t>(B));
    for (size_t b = 0; b < last_row.size(); ++b)
      last_row[b] = out_first[b] + out_rows[b] - 1;
    sampled = sampler_.enqueue(chunks, last_row, dl, V, stream_.get());
    mark_op("sample_rows");
  }
  // The other chunks' logits rows (and every row of the all-logits chunks) come back into pinned
  // memory (a pageable copy runs at a fraction of the link: 12 ms for batch 256 on the H200)
  // unless they are large (long all-logits chunks), which would pin gigabytes for good; the
  // arena is reset at the next step's start. Consecutive rows go in one copy.
  std::vector<bool> to_host(static_cast<size_t>(B));
  for (size_t b = 0; b < to_host.size(); ++b)
    to_host[b] = !sampled[b] || chunks[b].all_logits;
  const auto n_logits = static_cast<size_t>(n * V);
  std::vector<float> pageable;
  float* l = nullptr;
  if (std::find(to_host.begin(), to_host.end(), true) != to_host.end()) {
    if (n_logits * sizeof(float) <= kPinnedLogitsMaxBytes) {
      l = reinterpret_cast<float*>(uploads_.allocate(n_logits * sizeof(float), 64).data());
    } else {
      pageable.resize(n_logits);
      l = pageable.data();
    }
  }
  for (size_t b = 0; b < to_host.size();) {
    size_t e = b;
    while (e < to_host.size() && to_host[e])
      ++e;
    if (e == b) {
      ++b;
      continue;
    }
    const auto first = static_cast<size_t>(out_first[b] * V);
    const auto count = static_cast<size_t>((out_first[e - 1] + out_rows[e - 1]) * V) - first;
    DI_CUDA_CHECK(cudaMemcpyAsync(l + first, dl + first, count * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_.get()));
    b = e;
  }
  mark_op("logits to host");
  std::vector<uint8_t> tap_bytes(static_cast<size_t>(n_taps * R * D * ab));
  if (n_taps > 0) {
    DI_CUDA_CHECK(cudaMemcpyAsync(tap_bytes.data(), taps_dev, tap_bytes.size(),
                                  cudaMemcpyDeviceToHost, stream_.get()));
  }
  mark_block(static_cast<size_t>(cfg_.num_layers) + 1);
  stream_.synchronize();
  stamp(step_synced_);
  collect_op_times();
  if (cuda_.time_blocks) {
    block_ms_.clear();
    block_host_ms_.clear();
    for (size_t k = 0; k + 1 < block_events_.size(); ++k) {
      block_ms_.push_back(Event::elapsed_ms(block_events_[k], block_events_[k + 1]));
      block_host_ms_.push_back(
          std::chrono::duration<double, std::milli>(block_host_[k + 1] - block_host_[k]).count());
    }
  }
  if (std::find(sampled.begin(), sampled.end(), true) != sampled.end()) {
    res.sampled = sampler_.collect();
  }
  if (tracer_ != nullptr) {
    const std::vector<double> last(l + n_logits - static_cast<size_t>(V), l + n_logits);
    tracer_->record("final.logits", last, {1, V});
  }
  std::vector<float> tap_values(static_cast<size_t>(n_taps * R * D));
  for (size_t k = 0; k < tap_values.size(); ++k) {
    if (act_ == ActPrecision::kBF16) {
      uint16_t bits = 0;
      std::memcpy(&bits, tap_bytes.data() + 2 * k, 2);
      tap_values[k] = bf16_to_float(bits);
    } else {
      std::memcpy(&tap_values[k], tap_bytes.data() + 4 * k, 4);
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    StepSeq& q = step.seqs[static_cast<size_t>(b)];
    const auto first = static_cast<size_t>(out_first[static_cast<size_t>(b)] * V);
    const auto cnt = static_cast<size_t>(out_rows[static_cast<size_t>(b)]);
    const auto uV = static_cast<size_t>(V);
    if (to_host[static_cast<size_t>(b)]) {
      res.logits[static_cast<size_t>(b)].assign(l + first + (cnt - 1) * uV, l + first + cnt * uV);
    }
    if (chunks[static_cast<size_t>(b)].all_logits) {
      res.all_logits[static_cast<size_t>(b)].assign(l + first, l + first + cnt * uV);
    }
    auto& taps = res.main_hidden[static_cast<size_t>(b)];
    taps.assign(static_cast<size_t>(q.rows), {});
    for (int64_t r = 0; r < q.rows; ++r) {
      for (int64_t k = 0; k < n_taps; ++k) {
        const float* m = tap_values.data() + (k * R + q.row0 + r) * D;
        taps[static_cast<size_t>(r)].insert(taps[static_cast<size_t>(r)].end(), m, m + D);
      }
    }
    q.st->tokens += q.rows;
  }
}

void CudaModel::block_forward(int64_t i, const Step& step, Shared& shared) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const int64_t S = step.rows;
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  void* h = act("h", S * hc * D);
  void* h1 = act("h1", S * hc * D);
  float* pre_mix = buf<float>("pre_mix", S * hc);
  float* attn_pre = buf<float>("attn_pre", S * hc);
  auto pre_params = [&](const void* stream, const DevHc& m, const float* carried, float* pre,
                        const std::string& tag) {
    MhcPreParams p;
    p.stream = stream;
    p.storage = mhc_storage();
    p.fn_packed = m.fn_packed;
    p.scale = m.scale;
    p.base = m.base;
    p.carried_pre = carried;
    p.tokens = S;
    p.dim = D;
    p.norm_eps = static_cast<float>(cfg_.rms_norm_eps);
    p.hc_eps = static_cast<float>(cfg_.hc_eps);
    p.sinkhorn_iters = static_cast<int>(cfg_.hc_sinkhorn_iters);
    p.collapsed = act("x", S * D);
    p.pre = pre;
    p.post = buf<float>(tag + ".post", S * hc);
    p.comb = buf<float>(tag + ".comb", S * hc * hc);
    p.workspace = static_cast<float*>(buf("mhc.workspace", mhc_pre_workspace_bytes(S, D)));
    return p;
  };
  // A site's pre side around its norm: the pass (collapse + partial sums), the norm of the
  // collapse, then the finalize (pre / post / comb, read only at the site's post side and by the
  // next site) beside the norm kernel instead of before it. The norm kernel waits for the pass
  // before it lets the finalize start (mhc_pre_finalize's condition).
  auto mhc_pre_site = [&](const MhcPreParams& p, const float* norm, uint8_t* interleaved) {
    mhc_pre_pass(p, stream_.get());
    after("mhc_pre");
    norm_quant(act("x", S * D), S, D, norm, act("xn", S * D), buf<uint8_t>("xq", S * D),
               buf<uint8_t>("xs", S * D / kActBlock), interleaved);
    mhc_pre_finalize(p, stream_.get(), MhcFinalizeOrder::kBesidePrevious);
    after("mhc_pre_finalize");
  };
  auto mhc_post_site = [&](const void* y, const void* in, void* out, const std::string& tag) {
    MhcPostParams p;
    p.storage = mhc_storage();
    p.y = y;
    p.stream_in = in;
    p.post = buf<float>(tag + ".post", S * hc);
    p.comb = buf<float>(tag + ".comb", S * hc * hc);
    p.tokens = S;
    p.dim = D;
    p.stream_out = out;
    mhc_post(p, stream_.get());
    after("mhc_post");
  };
  auto trace_mix = [&](const std::string& site, const float* pre) {
    trace_dev(i, site + ".pre", pre, {S, hc});
    trace_dev(i, site + ".post", buf<float>(site + ".post", S * hc), {S, hc});
    trace_dev(i, site + ".comb", buf<float>(site + ".comb", S * hc * hc), {S, hc, hc});
  };
  trace_act(i, "in", h, {S, hc, D});
  // Attention site: mixes + collapse with the carried pre-mix, attn_norm (+ act_quant).
  mhc_pre_site(pre_params(h, w.hc_attn, pre_mix, attn_pre, "attn_mix"), w.attn_norm, nullptr);
  trace_mix("attn_mix", attn_pre);
  trace_act(i, "attn.x", act("xn", S * D), {S, D});
  attention(i, step, shared);
  trace_act(i, "attn.out", act("attn.out", S * D), {S, D});
  mhc_post_site(act("attn.out", S * D), h, h1, "attn_mix");
  trace_act(i, "mid", h1, {S, hc, D});
  // FFN site: its input collapses with the attention site's pre-mix (one-sublayer lag).
  // The tensor-core expert GEMM reads the codes in the interleaved order: written here too.
  mhc_pre_site(pre_params(h1, w.hc_ffn, attn_pre, pre_mix, "ffn_mix"), w.ffn_norm,
               exact_ ? nullptr : buf<uint8_t>("moe.xqi", S * D));
  trace_mix("ffn_mix", pre_mix);
  trace_act(i, "ffn.x", act("xn", S * D), {S, D});
  moe(i, S);
  trace_act(i, "ffn.out", act("ffn.out", S * D), {S, D});
  mhc_post_site(act("ffn.out", S * D), h1, h, "ffn_mix");
  trace_act(i, "out", h, {S, hc, D});
}

}  // namespace di::v41::gpu
