// DSpark drafting on the GPU (delta spec §4.2; Model::dspark_prefill / dspark_step are the
// reference; docs/design/cuda_forward.md, "DSpark on the GPU").

#include "model/deepseek_v41/cuda_model_impl.h"

namespace di::v41::gpu {

CudaSeqState& CudaModel::gpu_draft_state(SequenceState& state) const {
  auto* st = dynamic_cast<CudaSeqState*>(&state);
  DI_CHECK(st != nullptr, "DSpark: sequence state of another model or backend");
  DI_CHECK(st->kv == dkv_, "DSpark: sequence state of another CUDA model");
  DI_CHECK(cfg_.num_nextn_predict_layers > 0, "DSpark: this model has no draft stages");
  DI_CHECK(gpu_drafter(),
           "DSpark: the model was loaded without its drafter "
           "(CudaForwardOptions::drafter kNone)");
  return *st;
}

// Called only with the CPU drafter built (drafter_), so every sequence state carries its draft
// state; a model without a drafter takes gpu_draft_state, whose checks name the cause.
SequenceState& CudaModel::draft_state(SequenceState& state) const {
  auto* st = dynamic_cast<CudaSeqState*>(&state);
  DI_CHECK(st != nullptr, "DSpark: sequence state of another model or backend");
  DI_CHECK(st->draft != nullptr, "DSpark: sequence state without its CPU draft state");
  return *st->draft;
}

void CudaModel::dspark_main_x(const std::vector<const std::vector<double>*>& rows) {
  const int64_t D = cfg_.hidden_size, n = static_cast<int64_t>(rows.size());
  const int64_t k = draft_.main_proj.k;  // taps of the target layers, concatenated
  // The taps in the activation precision (bf16 taps widened by the backbone: exact again).
  std::vector<uint8_t> bytes(static_cast<size_t>(n * k) * act_bytes());
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<double>& row = *rows[static_cast<size_t>(r)];
    DI_CHECK(static_cast<int64_t>(row.size()) == k,
             "dspark: main_hidden row has {} values, main_proj expects {}", row.size(), k);
    for (int64_t c = 0; c < k; ++c) {
      const auto f = static_cast<float>(row[static_cast<size_t>(c)]);
      const auto at = static_cast<size_t>(r * k + c);
      if (act_ == ActPrecision::kBF16) {
        const uint16_t b = bf16_from_float(f);
        std::memcpy(bytes.data() + 2 * at, &b, 2);
      } else {
        std::memcpy(bytes.data() + 4 * at, &f, 4);
      }
    }
  }
  const uint8_t* taps = upload<uint8_t>("dspark.taps", bytes);
  void* proj = act("dspark.main_proj", n * D);
  gemm_x(taps, n, draft_.main_proj, proj);  // linear_q: act_quant 32, FP8 GEMM
  // main_norm, and main_x's act_quant once for every stage's wkv (the same codes each time).
  norm_quant(proj, n, D, draft_.main_norm, act("dspark.main_x", n * D),
             buf<uint8_t>("dspark.main_xq", n * D),
             buf<uint8_t>("dspark.main_xs", n * D / kActBlock));
}

void CudaModel::dspark_main_kv(int64_t i, const PagedTable& swa, int64_t rows) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const int64_t hd = cfg_.head_dim;
  void* kv = act("dspark.main_kv", rows * hd);
  const int64_t D = cfg_.hidden_size;
  gemm_q(buf<uint8_t>("dspark.main_xq", rows * D),
         buf<uint8_t>("dspark.main_xs", rows * D / kActBlock), rows, w.wkv, kv);
  SwaWriteParams sw = swa_params(i, swa, kv, rows);
  sw.seq = buf<int32_t>("dspark.main_seq", rows);
  sw.positions = buf<int64_t>("dspark.main_pos", rows);
  // Only each sequence's newest `window` rows reach its ring (no two rows race for a slot).
  sw.seq_end = buf<int64_t>("dspark.main_end", 1);
  sw.write_ring = true;
  swa_write(sw, ls_);
  after("swa_write (main_kv)", i);
}

void CudaModel::dspark_prefill_gpu(CudaSeqState& st,
                                   const std::vector<std::vector<double>>& main_hidden_rows) {
  DI_CUDA_CHECK(cudaSetDevice(cuda_.device));
  const auto total = static_cast<int64_t>(main_hidden_rows.size());
  if (total == 0) return;
  // A ring keeps the newest `window` positions: the rows before them would be overwritten within
  // this call, so only the last `window` rows are computed (the CPU writes every row in turn;
  // the ring ends the same).
  for (int64_t r = 0; r < total; ++r) {
    DI_CHECK(
        static_cast<int64_t>(main_hidden_rows[static_cast<size_t>(r)].size()) == draft_.main_proj.k,
        "dspark_prefill: main_hidden row {} has {} values, main_proj expects {}", r,
        main_hidden_rows[static_cast<size_t>(r)].size(), draft_.main_proj.k);
  }
  const int64_t skip = std::max<int64_t>(0, total - cfg_.sliding_window);
  const int64_t n = total - skip;
  const int64_t first = st.draft_tokens + skip;  // position of the first computed row
  begin_step();
  Step step;
  step.seqs.push_back({&st, first, n, 0, {}, {}});
  step.rows = n;
  DI_CHECK(
      !dkv_->kv.pages(st.id, StateKind::kSwaRing, 0).empty(),
      "dspark_prefill: the sequence holds no cache pages yet (run its backbone prefill first)");
  const PagedTable swa =
      page_tables(step, {dkv_->kv.layout().table_index(StateKind::kSwaRing, 0)}).at(0);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r)
    pos[static_cast<size_t>(r)] = first + r;
  upload<int32_t>("dspark.main_seq", std::vector<int32_t>(static_cast<size_t>(n), 0));
  upload<int64_t>("dspark.main_pos", pos);
  upload<int64_t>("dspark.main_end", std::vector<int64_t>{first + n});
  std::vector<const std::vector<double>*> rows;
  for (int64_t r = skip; r < total; ++r)
    rows.push_back(&main_hidden_rows[static_cast<size_t>(r)]);
  dspark_main_x(rows);
  for (int64_t s = 0; s < cfg_.num_nextn_predict_layers; ++s) {
    cur_block_ = cfg_.num_layers + s;
    dspark_main_kv(cur_block_, swa, n);
  }
  cur_block_ = -1;
  stream_.synchronize();
  collect_op_times();
  st.draft_tokens += total;
}

std::vector<DraftResult> CudaModel::dspark_step_gpu(std::span<const DraftRequest> requests) {
  DI_CUDA_CHECK(cudaSetDevice(cuda_.device));
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, V = cfg_.vocab_size;
  const int64_t bsz = cfg_.dspark_block_size, rank = cfg_.dspark_markov_rank;
  const auto B = static_cast<int64_t>(requests.size());  // sequences drafted together
  const int64_t R = B * bsz;
  const auto ab = static_cast<int64_t>(act_bytes());
  DI_CHECK(B > 0 && R <= 65535, "dspark: {} sequences in one drafting step", B);
  DI_CHECK(tracer_ == nullptr || B == 1, "dspark: tracing drafts one sequence per call");
  std::vector<CudaSeqState*> states;
  std::vector<const std::vector<double>*> taps;
  for (const DraftRequest& q : requests) {
    DI_CHECK(q.state != nullptr && q.main_hidden_row != nullptr,
             "dspark: request {} lacks its state or main_hidden row", states.size());
    CudaSeqState& st = gpu_draft_state(*q.state);
    DI_CHECK(q.input_id >= 0 && q.input_id < cfg_.vocab_size,
             "dspark: input id {} outside vocabulary (request {})", q.input_id, states.size());
    const auto dup = std::find(states.begin(), states.end(), &st);
    DI_CHECK(dup == states.end(), "dspark: requests {} and {} draft the same sequence",
             dup - states.begin(), states.size());
    DI_CHECK(!dkv_->kv.pages(st.id, StateKind::kSwaRing, 0).empty(),
             "dspark_step: the sequence of request {} holds no cache pages yet (run its backbone "
             "prefill first)",
             states.size());
    states.push_back(&st);
    taps.push_back(q.main_hidden_row);
  }
  begin_step();
  // Sequence b drafts after its backbone consumed position p_b (its draft_tokens): block rows
  // b * bsz .. at positions p_b + 1 .. p_b + bsz under the names the block launches read, and
  // its main row at position p_b.
  Step step;
  std::vector<int64_t> positions, ids, chunk_start, chunk_row0, seq_end, main_pos, main_end;
  std::vector<int32_t> seq, main_seq;
  for (int64_t b = 0; b < B; ++b) {
    CudaSeqState& st = *states[static_cast<size_t>(b)];
    const int64_t p = st.draft_tokens;
    step.seqs.push_back({&st, p + 1, bsz, b * bsz, {}, {}});
    for (int64_t r = 0; r < bsz; ++r) {
      positions.push_back(p + 1 + r);
      seq.push_back(static_cast<int32_t>(b));
      chunk_start.push_back(p + 1);
      chunk_row0.push_back(b * bsz);
      ids.push_back(r == 0 ? requests[static_cast<size_t>(b)].input_id
                           : cfg_.dspark_noise_token_id);
    }
    seq_end.push_back(p + 1 + bsz);
    main_seq.push_back(static_cast<int32_t>(b));
    main_pos.push_back(p);
    main_end.push_back(p + 1);
  }
  step.rows = R;
  step.swa = page_tables(step, {dkv_->kv.layout().table_index(StateKind::kSwaRing, 0)}).at(0);
  upload<int64_t>("positions", positions);
  upload<int32_t>("seq", seq);
  upload<int64_t>("seq_end", seq_end);
  upload<int64_t>("chunk_start", chunk_start);
  upload<int64_t>("chunk_row0", chunk_row0);
  upload<int32_t>("dspark.main_seq", main_seq);
  upload<int64_t>("dspark.main_pos", main_pos);
  upload<int64_t>("dspark.main_end", main_end);
  image_rows_ = false;  // draft rows are text: the stages' routers use `bias` only
  dspark_main_x(taps);
  trace_act(-1, "dspark.main_x", act("dspark.main_x", B * D), {B, D});

  embed_rows(ids);  // block ids [input, noise x (bsz - 1)] per sequence
  Shared shared;
  for (int64_t s = 0; s < cfg_.num_nextn_predict_layers; ++s) {
    cur_block_ = cfg_.num_layers + s;
    block_forward(cur_block_, step, shared);
  }
  cur_block_ = -1;

  // The last stage's head: collapse with its FFN pre-mix, the stage norm, the shared LM head.
  void* x = act("dspark.x", R * D);
  MhcCollapseParams cp;
  cp.stream = act("h", R * hc * D);
  cp.pre = buf<float>("pre_mix", R * hc);
  cp.tokens = R;
  cp.dim = D;
  cp.storage = mhc_storage();
  cp.out = x;
  mhc_collapse(cp, stream_.get());
  after("mhc_collapse (DSpark)");
  trace_act(-1, "dspark.x", x, {R, D});
  void* xn = act("dspark.xn", R * D);
  norm_rows(x, xn, R, draft_.norm, "rms_norm (DSpark)");
  float* logits = buf<float>("dspark.logits", R * V);
  gemv_bf16(xn, R, head_, logits);
  // The confidence head's input rows [x_r ; m_r]: x now, m_r as the Markov loop embeds it.
  const int64_t cw = D + rank;
  auto* cat = static_cast<uint8_t*>(act("dspark.cat", R * cw));
  DI_CUDA_CHECK(cudaMemcpy2DAsync(cat, static_cast<size_t>(cw * ab), x, static_cast<size_t>(D * ab),
                                  static_cast<size_t>(D * ab), static_cast<size_t>(R),
                                  cudaMemcpyDeviceToDevice, stream_.get()));
  mark_op("dspark cat x");
  // The Markov loop, row by row over all sequences at once: m = embed[prev], bias = head . m,
  // logits_r += bias, prev = argmax (the greedy draft).
  std::vector<int64_t> inputs;
  for (const DraftRequest& q : requests)
    inputs.push_back(q.input_id);
  int64_t* prev = upload<int64_t>("dspark.prev", inputs);
  int64_t* drafts = buf<int64_t>("dspark.drafts", R);
  void* m = act("dspark.m", B * rank);
  float* bias = buf<float>("dspark.bias", B * V);
  for (int64_t r = 0; r < bsz; ++r) {
    EmbeddingParams mp;
    mp.table = draft_.markov_embed.w;
    mp.ids = prev;
    mp.out = m;
    mp.rows = B;
    mp.vocab = draft_.markov_embed.n;
    mp.dim = rank;
    mp.copies = 1;
    mp.precision = act_;
    embedding_gather(mp, stream_.get());
    after("embedding_gather (markov)");
    DI_CUDA_CHECK(cudaMemcpy2DAsync(cat + (r * cw + D) * ab, static_cast<size_t>(bsz * cw * ab), m,
                                    static_cast<size_t>(rank * ab), static_cast<size_t>(rank * ab),
                                    static_cast<size_t>(B), cudaMemcpyDeviceToDevice,
                                    stream_.get()));
    mark_op("dspark cat m");
    gemv_bf16(m, B, draft_.markov_head, bias);
    MarkovStepParams mk;
    mk.logits = logits + r * V;
    mk.logits_stride = bsz * V;
    mk.bias = bias;
    mk.next = prev;
    mk.drafts = drafts + r;
    mk.drafts_stride = bsz;
    mk.rows = B;
    mk.vocab = V;
    markov_step(mk, stream_.get());
    after("markov_step");
  }
  float* conf = buf<float>("dspark.confidence", R);
  gemv_bf16(cat, R, draft_.confidence, conf);  // proj([x_r ; m_r]): a raw fp32 logit

  // Results into pinned memory, one synchronisation: the drafts, the confidences, and the logits
  // of the sequences that asked for them (DraftRequest::logits; their rows, contiguous per
  // sequence). Pinned unless the logits are large: see kPinnedLogitsMaxBytes.
  int64_t with_logits = 0;
  for (const DraftRequest& q : requests)
    with_logits += q.logits ? 1 : 0;
  const bool traced = tracer_ != nullptr;
  const size_t logit_bytes =
      static_cast<size_t>((traced ? B : with_logits) * bsz * V) * sizeof(float);
  std::vector<float> pageable;
  float* h_logits = nullptr;
  if (logit_bytes <= kPinnedLogitsMaxBytes) {
    h_logits = reinterpret_cast<float*>(uploads_.allocate(logit_bytes, 64).data());
  } else {
    pageable.resize(logit_bytes / sizeof(float));
    h_logits = pageable.data();
  }
  auto* h_drafts = reinterpret_cast<int64_t*>(
      uploads_.allocate(static_cast<size_t>(R) * sizeof(int64_t), 64).data());
  auto* h_conf = reinterpret_cast<float*>(
      uploads_.allocate(static_cast<size_t>(R) * sizeof(float), 64).data());
  // h_row[b]: sequence b's first logits row on the host. Traced: every sequence's, in one copy
  // (the tracer records all rows); else one copy per sequence that asked.
  std::vector<const float*> h_row(static_cast<size_t>(B), nullptr);
  if (traced) {
    DI_CUDA_CHECK(
        cudaMemcpyAsync(h_logits, logits, logit_bytes, cudaMemcpyDeviceToHost, stream_.get()));
  }
  for (int64_t b = 0, k = 0; b < B; ++b) {
    if (!traced && !requests[static_cast<size_t>(b)].logits) continue;
    h_row[static_cast<size_t>(b)] = h_logits + k * bsz * V;
    if (!traced) {
      DI_CUDA_CHECK(cudaMemcpyAsync(h_logits + k * bsz * V, logits + b * bsz * V,
                                    static_cast<size_t>(bsz * V) * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_.get()));
    }
    ++k;
  }
  DI_CUDA_CHECK(cudaMemcpyAsync(h_drafts, drafts, static_cast<size_t>(R) * sizeof(int64_t),
                                cudaMemcpyDeviceToHost, stream_.get()));
  DI_CUDA_CHECK(cudaMemcpyAsync(h_conf, conf, static_cast<size_t>(R) * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_.get()));
  mark_op("dspark results to host");
  stream_.synchronize();
  collect_op_times();
  std::vector<DraftResult> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    states[static_cast<size_t>(b)]->draft_tokens += 1;
    DraftResult& res = out[static_cast<size_t>(b)];
    const bool want = requests[static_cast<size_t>(b)].logits;
    for (int64_t r = b * bsz; r < (b + 1) * bsz; ++r) {
      res.draft_ids.push_back(h_drafts[r]);
      if (want) {
        const float* row = h_row[static_cast<size_t>(b)] + (r - b * bsz) * V;
        res.logits.emplace_back(row, row + V);
      }
      res.confidence.push_back(static_cast<double>(h_conf[r]));
    }
  }
  if (tracer_ != nullptr) {
    tracer_->record("dspark.logits", std::vector<double>(h_logits, h_logits + R * V), {bsz, V});
    tracer_->record_ids("dspark.draft_ids", out[0].draft_ids, {bsz});
    tracer_->record("dspark.confidence", out[0].confidence, {bsz});
  }
  return out;
}

}  // namespace di::v41::gpu
