// The attention of one block on the GPU: window KV write, queries, compressor, indexer and
// top-k, sparse attention, grouped output projection (cuda_model_impl.h).

#include "model/deepseek_v41/cuda_model_impl.h"

namespace di::v41::gpu {

void CudaModel::attention(int64_t i, const Step& step, Shared& shared) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const int64_t S = step.rows, B = step.batch();
  const LayerPlan& p = host_.blocks[static_cast<size_t>(i)].plan;
  const int64_t H = cfg_.num_heads, hd = cfg_.head_dim, win = cfg_.sliding_window;
  const float* freqs = freqs_for(i);
  const uint8_t* xq = buf<uint8_t>("xq", S * cfg_.hidden_size);
  const uint8_t* xs = buf<uint8_t>("xs", S * cfg_.hidden_size / kActBlock);
  // Two independent branches from the normed input, the KV side on the side stream:
  // - window K = V: wkv, then kv_norm + RoPE + FP8 into the chunk's entries (the ring is written
  //   after the attention: a prefill chunk's rows would overwrite slots its own queries read);
  //   and the compressor (full layers), which appends to the compressed cache and the index keys;
  // - queries: wq_a, q_norm (+ act_quant, shared with the indexer's wq_b), wq_b (q's RoPE is
  //   applied by the attention kernel as it reads q).
  // The indexer reads both: its query projection runs after q_norm on the main stream while the
  // attention's wq_b runs on the side stream behind the KV branch (joined before the attention),
  // and its per-head weights on the KV branch (joined before the scoring).
  const int64_t compress_len =
      p.compress_ratio > 0 ? step.max_entries(p.compress_ratio) : 0;  // the longest sequence's
  // A layer with its own top-k (Full, Reindex) selects once entries are visible.
  const bool own_topk =
      p.compress_ratio > 0 && (p.mode == AttnMode::kFull || p.mode == AttnMode::kReindex);
  const bool run_indexer = own_topk && compress_len > 0;
  // A DSpark draft stage (Model::dspark_attention): main_kv(p) enters the ring, the block's own
  // kv stays in chunk_kv, and every draft row attends to the ring and the whole block.
  const bool draft = p.draft_stage >= 0;
  const bool fork = side_ok();
  if (fork) fork_side();
  void* kv = act("kv", S * hd);
  gemm_q(xq, xs, S, w.wkv, kv);
  const PagedTable& swa = step.swa;
  SwaWriteParams sw = swa_params(i, swa, kv, S);
  sw.seq = buf<int32_t>("seq", S);
  sw.positions = buf<int64_t>("positions", S);
  sw.seq_end = buf<int64_t>("seq_end", B);
  sw.chunk_entries = buf<uint8_t>("chunk_kv", S * swa_bytes_);
  // A row at position p replaces ring slot p - window, which no query of its own sequence reads
  // unless the sequence has more than one row in the step: with one row per sequence (decode)
  // the ring is written here, beside the chunk's copy, instead of in a launch after the attention.
  const bool ring_now = S == B && !draft;
  sw.write_ring = ring_now;
  swa_write(sw, ls_);
  after("swa_write");
  if (draft) dspark_main_kv(i, swa, B);
  const void* xn = act("xn", S * cfg_.hidden_size);
  if (p.compress_ratio > 0 && p.mode == AttnMode::kFull) compress(i, step, xn);
  if (run_indexer) index_weights(i, S, xn);
  if (fork) end_side();

  void* qr = act("qr", S * cfg_.q_lora_rank);
  gemm_q(xq, xs, S, w.wq_a, qr);
  void* qrn = tracer_ != nullptr ? act("qrn", S * cfg_.q_lora_rank) : nullptr;
  norm_quant(qr, S, cfg_.q_lora_rank, w.q_norm, qrn, buf<uint8_t>("qrq", S * cfg_.q_lora_rank),
             buf<uint8_t>("qrs", S * cfg_.q_lora_rank / kActBlock));
  if (qrn != nullptr) trace_act(i, "attn.qr", qrn, {S, cfg_.q_lora_rank});
  // wq_b beside the indexer (which reads qr's codes too, not q). q's RoPE is applied by the
  // attention kernel as it reads q, unless q is traced (the trace holds q after its RoPE).
  const bool q_side = fork && run_indexer;
  const bool rope_in_attention = tracer_ == nullptr;
  if (q_side) fork_side();
  void* q = act("q", S * H * hd);
  gemm_q(buf<uint8_t>("qrq", S * cfg_.q_lora_rank),
         buf<uint8_t>("qrs", S * cfg_.q_lora_rank / kActBlock), S, w.wq_b, q);
  if (!rope_in_attention) {
    rope(q, S, H, hd, freqs, false);
    trace_act(i, "attn.q", q, {S, H, hd});
  }
  if (q_side) end_side(join_q_);

  if (own_topk) shared.topk_width = 0;
  if (run_indexer) indexer(i, step, shared, /*join_kv=*/fork);
  if (q_side) {
    join_side(join_q_);  // q (the KV branch was joined in the indexer)
  } else if (fork) {
    join_side();
  }

  SparseAttnParams ap;
  ap.q = q;
  ap.out = act("o", S * H * hd);
  ap.rows = S;
  ap.precision = act_;
  ap.seq = buf<int32_t>("seq", S);
  ap.pos = buf<int64_t>("positions", S);
  ap.chunk_start = buf<int64_t>("chunk_start", S);
  ap.chunk_row0 = buf<int64_t>("chunk_row0", S);
  ap.swa = swa;
  ap.ring_block = static_cast<int32_t>(i);
  ap.window = static_cast<int32_t>(win);
  ap.chunk_kv = buf<uint8_t>("chunk_kv", S * swa_bytes_);
  if (draft) ap.block_rows = static_cast<int32_t>(S / B);  // the block size: B blocks of rows
  if (p.compress_ratio > 0 && compress_len > 0 && shared.topk_width > 0) {
    // Row r reads only entries its own top-k names (< its sequence's visible count), all held by
    // its sequence's pages; shorter sequences' page lists are padded (build_tables).
    ap.comp = step.comp.at(p.kv_source);
    ap.topk = buf<int32_t>("topk", S * cfg_.index_topk);
    ap.topk_width = shared.topk_width;
    ap.comp_entries = compress_len;
  }
  ap.sink = w.attn_sink;
  ap.scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5));
  ap.rope_freqs = freqs;
  ap.rope_dim = static_cast<int32_t>(cfg_.rope_head_dim);
  ap.q_rope = rope_in_attention;
  ap.heads = static_cast<int32_t>(H);
  ap.head_dim = static_cast<int32_t>(hd);
  ap.fp32_reference = exact_;
  ap.tensor_kernel = cuda_.attention_kernel;
  sparse_attention(ap, stream_.get());
  after("sparse_attention");
  trace_act(i, "attn.o", ap.out, {S, H, hd});
  if (!ring_now && !draft) {
    sw.write_ring = true;
    sw.chunk_entries = nullptr;
    swa_write(sw, stream_.get());
    after("swa_write");
  }

  // Grouped low-rank output (wo_a), then act_quant + wo_b.
  const int64_t G = cfg_.o_groups, R = cfg_.o_lora_rank;
  WoAParams op;
  op.o = ap.out;
  op.precision = act_;
  op.weight = w.wo_a.w;
  op.weight_scale = w.wo_a.s;
  op.block = w.wo_a.block;
  op.rows = S;
  op.groups = G;
  op.rank = R;
  op.group_width = H * hd / G;
  op.z = act("z", S * G * R);
  if (exact_) {
    // Group g: rows [g R, (g + 1) R) of wo_a (scale blocks start there: R % block == 0) over its
    // columns of o, no activation quantisation (the CPU's plain linear per group).
    const int64_t gw = op.group_width, scols = (gw + op.block - 1) / op.block;
    for (int64_t g = 0; g < G; ++g) {
      LinearExactParams lp;
      lp.x = static_cast<const float*>(op.o) + g * gw;
      lp.x_stride = H * hd;
      lp.format = ExactWeightFormat::kFp8WoATiled;  // group g's tiles start at g * R * gw
      lp.weight = op.weight + g * R * gw;
      lp.weight_scale = op.weight_scale + (g * R / op.block) * scols;
      lp.bn = lp.bk = op.block;
      lp.m = S;
      lp.n = R;
      lp.k = gw;
      lp.y = static_cast<float*>(op.z) + g * R;
      lp.y_stride = G * R;
      linear_exact(lp, stream_.get());
      after("linear_exact (wo_a)");
    }
  } else {
    if (wo_a_fuses_act_quant(op)) {
      // wo_a also writes z's act_quant (block kActBlock = 32, the standalone act_quant's bits)
      // for wo_b: one launch less.
      op.z_codes = buf<uint8_t>("gemm.xq", S * G * R);
      op.z_scales = buf<uint8_t>("gemm.xs", S * G * R / kActBlock);
    }
    wo_a(op, stream_.get());
    after("wo_a");
  }
  void* out = act("attn.out", S * cfg_.hidden_size);
  if (op.z_codes != nullptr) {
    gemm_q(op.z_codes, op.z_scales, S, w.wo_b, out);
  } else {
    gemm_x(op.z, S, w.wo_b, out);
  }
}

void CudaModel::compress(int64_t i, const Step& step, const void* xn) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const int64_t S = step.rows;
  const LayerPlan& p = host_.blocks[static_cast<size_t>(i)].plan;
  const int64_t hd = cfg_.head_dim, ratio = p.compress_ratio;
  // Not quantised in the reference: fp32 GEMMs over the (widened) normed input. Ratio 1 has bf16
  // weights, so its output is an activation (rounded in the bf16 precision); ratio 2 pools fp32.
  float* kvc = buf<float>("comp.kv", S * hd);
  gemv_bf16(xn, S, w.comp_wkv, kvc);
  std::vector<int32_t> state_rows;  // per table batch row: its ratio-2 tail row
  for (const StepSeq& q : step.seqs)
    state_rows.push_back(ratio > 1 ? q.st->tail_row[static_cast<size_t>(i)] : 0);
  const CompressorPlan plan =
      plan_compressor(static_cast<int>(ratio), step.seq, step.positions, state_rows);
  const PagedTable& comp = step.comp.at(i);
  float* latent = buf<float>("comp.latent", S * hd);
  if (ratio == 1) {
    CompressRatio1Params c;
    c.x = kvc;
    if (act_ == ActPrecision::kBF16) {
      c.x = act("comp.kv.act", S * hd);
      round_to_act(kvc, act("comp.kv.act", S * hd), S * hd);
      c.precision = act_;
    }
    c.norm_weight = w.comp_norm;
    c.freqs = freqs_for(i);
    c.seq = buf<int32_t>("seq", S);
    c.positions = buf<int64_t>("positions", S);
    c.latent = latent;
    c.table = comp;
    c.rows = S;
    c.eps = static_cast<float>(cfg_.rms_norm_eps);
    c.dim = static_cast<int32_t>(hd);
    c.rope_dim = static_cast<int32_t>(cfg_.rope_head_dim);
    compress_ratio1(c, ls_);
    after("compress_ratio1");
  } else {
    DI_CHECK(ratio == 2, "layer {}: compress ratio {} (the V4.1 CUDA forward has 1 and 2)", i,
             ratio);
    float* score = buf<float>("comp.score", S * hd);
    gemv_bf16(xn, S, w.comp_wgate, score);
    if (plan.work.empty()) return;
    CompressRatio2Params c;
    c.kv = kvc;
    c.score = score;
    c.norm_weight = w.comp_norm;
    c.freqs = freqs_for(i);
    c.work = upload<Ratio2Work>("comp.work", plan.work);
    c.state = dkv_->tails.as<float>();
    c.latent = latent;
    c.table = comp;
    c.works = static_cast<int64_t>(plan.work.size());
    c.eps = static_cast<float>(cfg_.rms_norm_eps);
    c.dim = static_cast<int32_t>(hd);
    c.rope_dim = static_cast<int32_t>(cfg_.rope_head_dim);
    compress_ratio2(c, ls_);
    after("compress_ratio2");
  }
  if (plan.groups() == 0) return;
  // Index keys of the new groups (pre-RoPE latents), published before this layer's indexer.
  IndexKeyParams k;
  k.latent = latent;
  k.wk = w.idx_wk.w;
  k.norm_weight = w.idx_k_norm;
  k.freqs = freqs_for(i);
  k.seq = upload<int32_t>("comp.group_seq", plan.group_seq);
  k.group = upload<int64_t>("comp.group_index", plan.group_index);
  k.table = step.keys.at(i);
  k.groups = plan.groups();
  k.ratio = static_cast<int32_t>(ratio);
  k.eps = static_cast<float>(cfg_.rms_norm_eps);
  k.latent_dim = static_cast<int32_t>(hd);
  k.dim = static_cast<int32_t>(cfg_.index_head_dim);
  k.rope_dim = static_cast<int32_t>(cfg_.rope_head_dim);
  index_key_write(k, ls_);
  after("index_key_write");
  for (int32_t b : plan.group_seq)  // the sequences that published keys in this layer
    step.seqs[static_cast<size_t>(b)].st->last_index_publisher = i;
}

void CudaModel::index_weights(int64_t i, int64_t S, const void* xn) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const int64_t IH = cfg_.index_n_heads, IHD = cfg_.index_head_dim;
  float* weights = buf<float>("index.w", S * IH);
  gemv_bf16(xn, S, w.idx_weights_proj, weights);
  // bf16 precision: the projection is a bf16 activation in the reference, and so is its product
  // with the scalar (both roundings in the one launch).
  ScaleParams sp;
  sp.x = weights;
  sp.n = S * IH;
  sp.s = static_cast<float>(std::pow(static_cast<double>(IHD), -0.5) *
                            std::pow(static_cast<double>(IH), -0.5));
  sp.round_bf16 = act_ == ActPrecision::kBF16;
  scale_values(sp, ls_);
  after("scale_values");
  trace_dev(i, "index.weights", weights, {S, IH});
}

void CudaModel::indexer(int64_t i, const Step& step, Shared& shared, bool join_kv) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const LayerPlan& p = host_.blocks[static_cast<size_t>(i)].plan;
  const int64_t ratio = p.compress_ratio;
  const int64_t IH = cfg_.index_n_heads, IHD = cfg_.index_head_dim;
  const int64_t S = step.rows, B = step.batch();
  const int64_t visible_total = step.max_entries(ratio);  // columns: the longest sequence's
  // Queries: FP8 GEMM from the quantised qr, RoPE on the tail, FP4 (UE8M0 per 32) packing.
  void* qi = act("index.q", S * IH * IHD);
  gemm_q(buf<uint8_t>("qrq", S * cfg_.q_lora_rank),
         buf<uint8_t>("qrs", S * cfg_.q_lora_rank / kActBlock), S, w.idx_wq_b, qi);
  IndexQueryPackParams qp;  // with the RoPE of qi's tails
  qp.q = qi;
  qp.positions = buf<int64_t>("positions", S);
  qp.rope_freqs = freqs_for(i);
  qp.rope_dim = static_cast<int32_t>(cfg_.rope_head_dim);
  qp.out = buf<uint8_t>("index.qp", S * IH * key_bytes_);
  qp.rows = S;
  qp.heads = static_cast<int32_t>(IH);
  qp.dim = static_cast<int32_t>(IHD);
  qp.precision = act_;
  index_query_pack(qp, stream_.get());
  after("index_query_pack");
  const float* weights = buf<float>("index.w", S * IH);

  // Whose keys: the owner's own (intended) or, per sequence, the last published slot (shipped
  // quirk; then table batch row b lists the pages of sequence b's last publisher).
  PagedTable keys = step.keys.at(p.kv_source);
  if (opts_.quirk == IndexKeyQuirk::kShipped) {
    const KvCacheManager& kv = dkv_->kv;
    std::vector<std::span<const int32_t>> lists;
    size_t stride = 1;
    for (const StepSeq& q : step.seqs) {
      const int64_t owner =
          q.st->last_index_publisher >= 0 ? q.st->last_index_publisher : p.kv_source;
      lists.push_back(kv.pages(q.st->id, StateKind::kIndexKeys, owner_.at(owner)));
      stride = std::max(stride, lists.back().size());
      DI_CHECK(static_cast<int64_t>(lists.back().size()) * keys.entries_per_page >=
                   (q.start + q.rows) / ratio,
               "layer {}: the index keys of layer {} hold fewer than {} entries", i, owner,
               (q.start + q.rows) / ratio);
    }
    std::vector<int32_t> flat;
    for (const auto& l : lists) {
      for (size_t j = 0; j < stride; ++j)
        flat.push_back(j < l.size() ? l[j] : (l.empty() ? 0 : l[0]));
    }
    keys.pages = upload<int32_t>("index.key_pages", flat);
    keys.pages_stride = static_cast<int32_t>(stride);
  }
  std::vector<int32_t> visible(static_cast<size_t>(S));
  for (int64_t r = 0; r < S; ++r)
    visible[static_cast<size_t>(r)] =
        static_cast<int32_t>((step.positions[static_cast<size_t>(r)] + 1) / ratio);
  const int32_t* row_visible = upload<int32_t>("index.visible", visible);
  const int64_t stride = static_cast<int64_t>(round_up(static_cast<size_t>(visible_total), 4));
  float* scores = buf<float>("index.scores", S * stride);
  if (join_kv) join_side();  // the index keys and weights of the KV branch
  IndexerScoreParams sc;
  sc.q = qp.out;
  sc.weights = weights;
  sc.keys = keys;
  sc.row_seq = buf<int32_t>("seq", S);
  sc.row_visible = row_visible;
  sc.rows = S;
  sc.rows_share_keys = S > B;  // prefill chunks: runs of rows of one sequence
  sc.n_cols = visible_total;
  sc.score_stride = stride;
  sc.scores = scores;
  sc.heads = static_cast<int32_t>(IH);
  sc.dim = static_cast<int32_t>(IHD);
  indexer_score(sc, stream_.get());
  after("indexer_score");
  if (p.candidate_builder) {
    // Level one: the best candidate_topk_blocks blocks (newest visible block pinned).
    IndexerCandidateParams cp;
    cp.scores = scores;
    cp.row_visible = row_visible;
    cp.rows = S;
    cp.n = visible_total;
    cp.score_stride = stride;
    cp.block_size = static_cast<int>(cfg_.candidate_block_size);
    cp.topk_blocks = static_cast<int>(cfg_.candidate_topk_blocks);
    cp.workspace = buf("index.cand.ws", indexer_candidates_workspace_bytes(
                                            S, visible_total, cp.block_size, cp.topk_blocks));
    cp.mask = buf<uint8_t>("index.cand.mask", S * visible_total);
    cp.mask_stride = visible_total;
    indexer_candidates(cp, stream_.get());
    after("indexer_candidates");
    shared.mask_len = visible_total;
  } else if (p.candidate_reader) {
    DI_CHECK(shared.mask_len >= 0, "layer {}: Reindex layer before the candidate source", i);
    IndexerMaskParams mp;
    mp.scores = scores;
    mp.rows = S;
    mp.n = visible_total;
    mp.score_stride = stride;
    mp.mask = buf<uint8_t>("index.cand.mask", S * shared.mask_len);
    mp.mask_stride = shared.mask_len;
    mp.mask_len = shared.mask_len;
    indexer_apply_mask(mp, stream_.get());
    after("indexer_apply_mask");
  }
  // Top-k among the reachable positions, sorted by position; unused slots stay -1. indexer_topk
  // writes min(K, n) slots of every row (-1 padded), so the fill is needed only while the
  // columns are fewer than K (a memset node also ends the chain of programmatic launches).
  const int64_t K = cfg_.index_topk;
  int32_t* topk = buf<int32_t>("topk", S * K);
  if (visible_total < K) {
    DI_CUDA_CHECK(
        cudaMemsetAsync(topk, 0xFF, static_cast<size_t>(S * K) * sizeof(int32_t), stream_.get()));
  }
  IndexerTopkParams tp;
  tp.scores = scores;
  tp.row_visible = row_visible;
  tp.rows = S;
  tp.n = visible_total;
  tp.score_stride = stride;
  tp.k = static_cast<int>(K);
  tp.out = topk;
  tp.out_stride = K;
  indexer_topk(tp, stream_.get());
  after("indexer_topk");
  shared.topk_width = static_cast<int32_t>(K);
}

SwaWriteParams CudaModel::swa_params(int64_t i, const PagedTable& swa, const void* kv,
                                     int64_t rows) const {
  SwaWriteParams sw;
  sw.x = kv;
  sw.norm_weight = blocks_[static_cast<size_t>(i)].kv_norm;
  sw.freqs = freqs_for(i);
  sw.table = swa;
  sw.rows = rows;
  sw.ring_block = static_cast<int32_t>(i);
  sw.window = static_cast<int32_t>(cfg_.sliding_window);
  sw.eps = static_cast<float>(cfg_.rms_norm_eps);
  sw.dim = static_cast<int32_t>(cfg_.head_dim);
  sw.rope_dim = static_cast<int32_t>(cfg_.rope_head_dim);
  sw.precision = act_;
  return sw;
}

}  // namespace di::v41::gpu
