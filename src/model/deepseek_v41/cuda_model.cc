// The DeepSeek-V4.1 backbone on the GPU: Model<float> (model.cc, attention.cc) step by step, each
// step one launcher of src/kernels/cuda (their parity tests pin each op to the CPU op it replaces).
// Per-step buffers live in a growable scratch set. The sequences' cache (window rings, and per
// kv-source owner the compressed entries and the index keys) lives in one device pool of
// fixed-size pages in the quantised formats of kernels/params/kv_cache.h, laid out and accounted
// by a KvCacheManager (the engine's own layout, so its budget is this pool's size); the ratio-2
// tails are rows of a separate device array. A forward call runs all of its chunks as one batched
// step: every launch covers the rows of every sequence. DSpark drafting (drafter kGpu) runs the
// draft stages as further blocks of the same kind over the draft rows, with their rings in the
// same SWA table (cuda_model_dspark.cc). This file: set-up, weights, tables and the launch
// helpers the other parts share (cuda_model_impl.h lists the parts).

#include "model/deepseek_v41/cuda_model_impl.h"

namespace di::v41::gpu {

CudaModel::CudaModel(std::shared_ptr<const Checkpoint> ckpt, ModelConfig cfg, ForwardOptions opts,
                     CudaForwardOptions cuda, std::optional<CompressedTokenMap> token_map)
    : ckpt_(std::move(ckpt)),
      cfg_(std::move(cfg)),
      opts_(opts),
      cuda_(cuda),
      info_(device_info(cuda.device)),
      host_(bind_weights<float>(cfg_, *ckpt_)),
      token_map_(std::move(token_map)) {
  if (const char* v = std::getenv("DI_CUDA_SYNC_CHECK")) sync_check_ = std::string(v) == "1";
  DI_CHECK(opts_.precision == Precision::kFp32 || opts_.precision == Precision::kBf16,
           "the CUDA backend runs --precision fp32 or bf16 (fp64 is the CPU's validation "
           "precision)");
  // bf16: activations stored in bf16 and the tensor-core linears (the exact-order ones are the
  // fp32 precision's); fp32: exact-order linears unless tensor_core_linears.
  act_ = opts_.precision == Precision::kBf16 ? ActPrecision::kBF16 : ActPrecision::kF32;
  exact_ = act_ == ActPrecision::kF32 && !cuda_.tensor_core_linears;
  DI_CHECK(cuda_.attention_kernel != AttnTensorKernel::kWgmma || act_ == ActPrecision::kBF16,
           "--attention-kernel wgmma runs the bf16 precision only (this model loads fp32)");
  DI_CHECK(cuda_.attention_kernel != AttnTensorKernel::kWgmma || info_.sm_major == 9,
           "--attention-kernel wgmma needs an sm_90 device (device {} is sm_{}{})", cuda.device,
           info_.sm_major, info_.sm_minor);
  ls_ = stream_.get();
  if (cuda_.time_blocks) {
    for (int64_t b = 0; b < cfg_.num_layers + 2; ++b)
      block_events_.emplace_back(true);
    block_host_.resize(block_events_.size());
  }
  DI_CHECK(cfg_.hc_mult == kMhcStreams,
           "CUDA backend: hc_mult {} (the mHC kernels are built for {})", cfg_.hc_mult,
           kMhcStreams);
  DI_CHECK(cfg_.quant.block_n == cfg_.quant.block_k && cfg_.quant.block_n == kActBlock,
           "CUDA backend: FP8 weight blocks {}x{} (the V4.1 forward uses {}x{})",
           cfg_.quant.block_n, cfg_.quant.block_k, kActBlock, kActBlock);
  if (!cfg_.engram_layer_ids.empty()) {
    engram_params_ = make_engram_hash_params(cfg_, *token_map_);
    place_engram_tables(host_, opts_.engram_tables);  // the host gathers their rows
  }
  if (cfg_.num_nextn_predict_layers > 0 && cuda_.drafter == DsparkDrafter::kCpuReference) {
    ForwardOptions drafter_opts = opts_;
    drafter_opts.engram_tables = EngramTables::kMapped;  // the same mapping, placed above
    drafter_ = std::make_unique<Model<float>>(ckpt_, cfg_, drafter_opts, token_map_);
  }
  swa_bytes_ = swa_entry_bytes(static_cast<int>(cfg_.head_dim));
  comp_bytes_ = comp_entry_bytes(static_cast<int>(cfg_.head_dim));
  key_bytes_ = index_key_bytes(static_cast<int>(cfg_.index_head_dim));
  upload_weights();
  // The cache pool: the configured budget, or half of what the weights left free.
  const StateBytes state = compute_state_bytes(cfg_, build_layer_plan(cfg_));
  DI_CHECK(state.swa_entry_bytes == swa_bytes_ &&
               (state.owners.empty() || (state.owners[0].kv_entry_bytes == comp_bytes_ &&
                                         state.owners[0].index_entry_bytes == key_bytes_)),
           "CUDA backend: the cache layout's entry sizes differ from the kernels' formats");
  for (size_t o = 0; o < state.owners.size(); ++o)
    owner_[state.owners[o].block] = static_cast<int64_t>(o);
  KvCacheConfig kc;
  kc.page_bytes = cuda_.kv_cache_page_bytes;
  kc.memory_budget_bytes = cuda_.kv_cache_bytes;
  if (kc.memory_budget_bytes == 0) {
    size_t free_bytes = 0, total_bytes = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    kc.memory_budget_bytes = free_bytes / 2;
  }
  const int64_t hd = cfg_.head_dim;
  tail_init_.assign(static_cast<size_t>(ratio2_state_floats(static_cast<int>(hd))), 0.0f);
  std::fill(tail_init_.begin() + 2 * hd, tail_init_.end(), -INFINITY);
  dkv_ = std::make_shared<DeviceKv>(state, kc, static_cast<int64_t>(tail_init_.size()));
}

DevFp8 CudaModel::fp8(const WeightRef& w, const std::string& tag, bool wo_a_tiles) {
  DI_CHECK(w.format == cpu::WeightFormat::kFp8Block && w.bn == w.bk,
           "CUDA backend: {} is not an FP8 weight with square scale blocks", tag);
  DevFp8 d;
  if (wo_a_tiles) {  // the grouped wo_a kernel's tiled codes (kernels/params/wo_a.h)
    DI_CHECK(static_cast<int64_t>(w.weight.bytes().size()) == w.rows * w.cols,
             "CUDA backend: {} holds {} bytes, expected {} x {}", tag, w.weight.bytes().size(),
             w.rows, w.cols);
    std::vector<uint8_t> tiled(w.weight.bytes().size());
    pack_wo_a_weight(reinterpret_cast<const uint8_t*>(w.weight.bytes().data()), w.rows, w.cols,
                     tiled.data());
    d.w = static_cast<const uint8_t*>(pool_.upload(std::as_bytes(std::span(tiled)), tag));
  } else {
    d.w = static_cast<const uint8_t*>(pool_.upload(w.weight.bytes(), tag));
  }
  d.s = static_cast<const uint8_t*>(pool_.upload(w.scale.bytes(), tag + ".scale"));
  d.n = w.rows;
  d.k = w.cols;
  d.block = w.bn;
  return d;
}

DevBf16 CudaModel::bf16(const WeightRef& w, const std::string& tag) {
  DI_CHECK(w.format == cpu::WeightFormat::kDense && w.weight.dtype == DType::kBF16,
           "CUDA backend: {} is not a bf16 weight (dtype {})", tag, dtype_name(w.weight.dtype));
  return DevBf16{static_cast<const uint16_t*>(pool_.upload(w.weight.bytes(), tag)), w.rows, w.cols};
}

void CudaModel::upload_weights() {
  DI_CUDA_CHECK(cudaSetDevice(cuda_.device));
  const int64_t D = cfg_.hidden_size;
  embed_ = static_cast<const uint16_t*>(
      pool_.upload(host_.embed.weight.bytes(), "embed"));  // bf16 [vocab, D]
  DI_CHECK(host_.embed.weight.dtype == DType::kBF16, "CUDA backend: embed is not bf16");
  head_ = bf16(host_.head, "head");
  final_norm_ = f32(host_.norm, "norm");
  freqs_plain_ = f32(cpu::rope_frequencies<float>(rope_params(cfg_, false)), "rope");
  freqs_compressed_ = f32(cpu::rope_frequencies<float>(rope_params(cfg_, true)), "rope.yarn");
  auto pack_hc = [&](const HcParams<float>& h, const std::string& tag) {
    std::vector<uint32_t> packed(mhc_fn_packed_words(D));
    mhc_pack_fn(h.fn.data(), D, packed.data());
    return DevHc{pool_.upload_vec(packed, tag + ".fn"), f32(h.scale, tag + ".scale"),
                 f32(h.base, tag + ".base")};
  };
  // The backbone's blocks, then (GPU drafter) the draft stages' blocks: the same weight names.
  const auto n_blocks = static_cast<size_t>(gpu_drafter() ? cfg_.num_blocks() : cfg_.num_layers);
  DI_CHECK(host_.blocks.size() >= n_blocks, "CUDA backend: {} blocks bound, {} needed",
           host_.blocks.size(), n_blocks);
  blocks_.resize(n_blocks);
  for (size_t i = 0; i < n_blocks; ++i) {
    const BlockWeights<float>& w = host_.blocks[i];
    DevBlock& d = blocks_[i];
    const std::string P = w.plan.prefix;
    d.attn_norm = f32(w.attn_norm, P + "attn_norm");
    d.ffn_norm = f32(w.ffn_norm, P + "ffn_norm");
    d.q_norm = f32(w.q_norm, P + "q_norm");
    d.kv_norm = f32(w.kv_norm, P + "kv_norm");
    d.attn_sink = f32(w.attn_sink, P + "attn_sink");
    d.hc_attn = pack_hc(w.hc_attn, P + "hc_attn");
    d.hc_ffn = pack_hc(w.hc_ffn, P + "hc_ffn");
    d.wq_a = fp8(w.wq_a, P + "attn.wq_a");
    d.wq_b = fp8(w.wq_b, P + "attn.wq_b");
    d.wkv = fp8(w.wkv, P + "attn.wkv");
    d.wo_a = fp8(w.wo_a, P + "attn.wo_a", /*wo_a_tiles=*/true);
    d.wo_b = fp8(w.wo_b, P + "attn.wo_b");
    if (w.comp_wkv) {
      d.comp_wkv = bf16(*w.comp_wkv, P + "compressor.wkv");
      d.comp_norm = f32(w.comp_norm, P + "compressor.norm");
    }
    if (w.comp_wgate) d.comp_wgate = bf16(*w.comp_wgate, P + "compressor.wgate");
    if (w.idx_wk) {
      d.idx_wk = bf16(*w.idx_wk, P + "indexer.wk");
      d.idx_k_norm = f32(w.idx_k_norm, P + "indexer.k_norm");
    }
    if (w.idx_wq_b) d.idx_wq_b = fp8(*w.idx_wq_b, P + "indexer.wq_b");
    if (w.idx_weights_proj) d.idx_weights_proj = bf16(*w.idx_weights_proj, P + "indexer.wproj");
    // MoE: router, routed experts (FP4 codes regrouped into the GPU's tiled order, scales as
    // stored), shared expert with w1 | w3 concatenated.
    d.gate = bf16(w.gate, P + "ffn.gate");
    d.gate_bias = f32(w.gate_bias, P + "ffn.gate.bias");
    d.gate_bias_vl = f32(w.gate_bias_vl, P + "ffn.gate.bias_vl");
    const size_t E = w.experts.size();
    std::vector<Fp4ExpertMatrix> w13(2 * E), w2(E);
    std::vector<uint8_t> tiled;  // one matrix's codes in the tiled order, reused
    for (size_t e = 0; e < E; ++e) {
      const ExpertWeights& ew = w.experts[e];
      const std::string ep = P + "ffn.experts." + std::to_string(e);
      auto fp4 = [&](const WeightRef& m, const std::string& tag) {
        DI_CHECK(m.format == cpu::WeightFormat::kFp4Row,
                 "CUDA backend: {} is not an FP4 expert weight (the routed-expert GEMM is FP4)",
                 tag);
        DI_CHECK(static_cast<int64_t>(m.weight.bytes().size()) == m.rows * m.cols / 2,
                 "CUDA backend: {} holds {} bytes of FP4 codes, expected {} x {} / 2", tag,
                 m.weight.bytes().size(), m.rows, m.cols);
        tiled.resize(static_cast<size_t>(fp4_expert_codes_bytes(m.rows, m.cols)));
        pack_fp4_expert_codes(reinterpret_cast<const uint8_t*>(m.weight.bytes().data()), m.rows,
                              m.cols, tiled.data());
        return Fp4ExpertMatrix{
            static_cast<const uint8_t*>(pool_.upload(std::as_bytes(std::span(tiled)), tag)),
            static_cast<const uint8_t*>(pool_.upload(m.scale.bytes(), tag))};
      };
      w13[e] = fp4(ew.w1, ep + ".w1");
      w13[E + e] = fp4(ew.w3, ep + ".w3");
      w2[e] = fp4(ew.w2, ep + ".w2");
    }
    d.experts_w13 = pool_.upload_vec(w13, P + "experts.w13");
    d.experts_w2 = pool_.upload_vec(w2, P + "experts.w2");
    {
      const WeightRef& a = w.shared.w1;
      const WeightRef& b = w.shared.w3;
      DI_CHECK(a.rows % a.bn == 0 && a.format == b.format && a.rows == b.rows && a.cols == b.cols,
               "CUDA backend: {}shared expert w1/w3 cannot be concatenated", P);
      std::vector<std::byte> wcat(a.weight.bytes().begin(), a.weight.bytes().end());
      wcat.insert(wcat.end(), b.weight.bytes().begin(), b.weight.bytes().end());
      std::vector<std::byte> scat(a.scale.bytes().begin(), a.scale.bytes().end());
      scat.insert(scat.end(), b.scale.bytes().begin(), b.scale.bytes().end());
      d.shared_w13 = DevFp8{static_cast<const uint8_t*>(pool_.upload(wcat, P + "shared.w13")),
                            static_cast<const uint8_t*>(pool_.upload(scat, P + "shared.w13.s")),
                            2 * a.rows, a.cols, a.bn};
      d.shared_w2 = fp8(w.shared.w2, P + "shared.w2");
    }
    if (w.engram_wkv) {
      d.engram_wkv = fp8(*w.engram_wkv, P + "engram.wkv");
      d.engram_qk = f32(w.engram_qk, P + "engram.qk");
    }
  }
  if (gpu_drafter()) {
    const BlockWeights<float>& s0 = host_.blocks[static_cast<size_t>(cfg_.num_layers)];
    const BlockWeights<float>& last = host_.blocks[n_blocks - 1];
    DI_CHECK(s0.main_proj && !s0.main_norm.empty() && !last.final_norm.empty() &&
                 last.markov_embed && last.markov_head && last.confidence_proj,
             "CUDA backend: the DSpark stages lack main_proj / main_norm / norm / markov_head / "
             "confidence_head weights");
    draft_.main_proj = fp8(*s0.main_proj, s0.plan.prefix + "main_proj");
    draft_.main_norm = f32(s0.main_norm, s0.plan.prefix + "main_norm");
    draft_.norm = f32(last.final_norm, last.plan.prefix + "norm");
    draft_.markov_embed = bf16(*last.markov_embed, last.plan.prefix + "markov_head.embed");
    draft_.markov_head = bf16(*last.markov_head, last.plan.prefix + "markov_head.head");
    draft_.confidence = bf16(*last.confidence_proj, last.plan.prefix + "confidence_head.proj");
    const int64_t rank = cfg_.dspark_markov_rank;
    DI_CHECK(cfg_.dspark_block_size >= 1 && cfg_.dspark_block_size <= kAttnChunk &&
                 cfg_.dspark_noise_token_id >= 0 && cfg_.dspark_noise_token_id < cfg_.vocab_size,
             "CUDA backend: DSpark block size {} (1..{}) or noise token id {} (vocabulary {})",
             cfg_.dspark_block_size, kAttnChunk, cfg_.dspark_noise_token_id, cfg_.vocab_size);
    DI_CHECK(draft_.markov_embed.k == rank && draft_.markov_head.k == rank &&
                 draft_.markov_embed.n == cfg_.vocab_size &&
                 draft_.markov_head.n == cfg_.vocab_size && draft_.confidence.n == 1 &&
                 draft_.confidence.k == D + rank && draft_.main_proj.n == D,
             "CUDA backend: DSpark head shapes (markov embed [{}, {}], head [{}, {}], confidence "
             "[{}, {}], main_proj [{}, {}]) do not match vocab {}, markov rank {}, hidden {}",
             draft_.markov_embed.n, draft_.markov_embed.k, draft_.markov_head.n,
             draft_.markov_head.k, draft_.confidence.n, draft_.confidence.k, draft_.main_proj.n,
             draft_.main_proj.k, cfg_.vocab_size, rank, D);
  }
  stream_.synchronize();
}

void CudaModel::fork_side() {
  fork_.record(stream_.get());
  DI_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), fork_.get(), 0));
  ls_ = side_.get();
}

void CudaModel::end_side() {
  end_side(join_);
}

void CudaModel::join_side() {
  join_side(join_);
}

void CudaModel::end_side(Event& done) {
  done.record(side_.get());
  ls_ = stream_.get();
}

void CudaModel::join_side(const Event& done) {
  DI_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), done.get(), 0));
}

void* CudaModel::buf(const std::string& name, size_t bytes) {
  bytes = std::max<size_t>(bytes, 16);
  auto it = scratch_.find(name);
  if (it == scratch_.end() || it->second.size() < bytes) {
    // A freed buffer may still be read by queued work: finish both streams first.
    stream_.synchronize();
    side_.synchronize();
    scratch_[name] = DeviceBuffer(round_up(bytes + bytes / 4, 256), "step buffer " + name);
    it = scratch_.find(name);
  }
  return it->second.data();
}

PagedTable CudaModel::paged(size_t table, const int32_t* pages, int32_t stride) const {
  const StateTable& t = dkv_->kv.layout().tables().at(table);
  PagedTable p;
  p.pool = static_cast<uint8_t*>(dkv_->pool.data());
  p.page_bytes = dkv_->kv.page_bytes();
  p.pages = pages;
  p.pages_stride = stride;
  p.entries_per_page = static_cast<int32_t>(t.entries_per_page);
  p.entry_bytes = static_cast<int32_t>(t.entry_bytes);
  return p;
}

void CudaModel::begin_step() {
  stream_.synchronize();
  side_.synchronize();
  uploads_.reset();
  ls_ = stream_.get();  // a step that threw between the fork and the join left the side stream
  op_count_ = 0;        // a step that threw left its events unread
}

std::unique_ptr<SequenceState> CudaModel::new_sequence() const {
  auto st = std::make_unique<CudaSeqState>(dkv_);
  if (drafter_) st->draft = drafter_->new_sequence();
  st->tail_row.assign(static_cast<size_t>(cfg_.num_layers), -1);
  DeviceKv& k = *dkv_;
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    const LayerPlan& p = host_.blocks[static_cast<size_t>(i)].plan;
    if (p.mode != AttnMode::kFull || p.compress_ratio < 2) continue;
    if (k.free_tails.empty()) {
      // Grow the tail rows (between forwards: no queued work reads the old array).
      const int64_t cap = std::max<int64_t>(64, 2 * k.tail_capacity);
      DeviceBuffer grown(static_cast<size_t>(cap * k.tail_floats) * sizeof(float),
                         "ratio-2 compressor tails");
      if (k.tail_capacity > 0) {
        DI_CUDA_CHECK(
            cudaMemcpy(grown.data(), k.tails.data(),
                       static_cast<size_t>(k.tail_capacity * k.tail_floats) * sizeof(float),
                       cudaMemcpyDeviceToDevice));
      }
      for (int64_t r = cap; r-- > k.tail_capacity;)
        k.free_tails.push_back(static_cast<int32_t>(r));
      k.tails = std::move(grown);
      k.tail_capacity = cap;
    }
    const int32_t row = k.free_tails.back();
    k.free_tails.pop_back();
    st->tail_row[static_cast<size_t>(i)] = row;
    DI_CUDA_CHECK(cudaMemcpy(k.tails.as<float>() + static_cast<int64_t>(row) * k.tail_floats,
                             tail_init_.data(), tail_init_.size() * sizeof(float),
                             cudaMemcpyHostToDevice));
  }
  return st;
}

void CudaModel::build_tables(Step& step) {
  KvCacheManager& kv = dkv_->kv;
  const StateLayout& layout = kv.layout();
  for (const StepSeq& q : step.seqs) {
    const int64_t total = q.start + q.rows;
    if (total <= kv.num_tokens(q.st->id)) continue;  // held already (a retried step)
    if (!kv.can_fit(q.st->id, total)) {
      DI_FAIL(
          "CUDA forward: the KV cache is full ({} of {} pages of {} KiB in use; a sequence of {} "
          "tokens needs {} more): raise CudaForwardOptions::kv_cache_bytes (--kv-cache-memory) or "
          "run fewer sequences at once",
          kv.used_pages(), kv.total_pages(), kv.page_bytes() / 1024, total,
          kv.pages_needed(q.st->id, total));
    }
    kv.allocate(q.st->id, total);
  }
  std::vector<size_t> tables = {layout.table_index(StateKind::kSwaRing, 0)};
  for (const auto& [block, owner] : owner_) {
    tables.push_back(layout.table_index(StateKind::kCompressedKv, owner));
    tables.push_back(layout.table_index(StateKind::kIndexKeys, owner));
  }
  const std::vector<PagedTable> t = page_tables(step, tables);
  step.swa = t[0];
  size_t k = 1;
  for (const auto& [block, owner] : owner_) {
    step.comp[block] = t[k++];
    step.keys[block] = t[k++];
  }
}

std::vector<PagedTable> CudaModel::page_tables(const Step& step,
                                               const std::vector<size_t>& tables) {
  const KvCacheManager& kv = dkv_->kv;
  const StateLayout& layout = kv.layout();
  // Page lists of the tables in one upload: [batch, stride] per table, stride = the most pages any
  // sequence of the step holds there (shorter lists padded with their first page or 0; padded
  // slots lie past the entries a sequence ever reads or writes).
  std::vector<int32_t> flat;
  std::vector<std::pair<size_t, int32_t>> where;  // offset, stride
  for (const size_t t : tables) {
    const StateTable& st = layout.tables().at(t);
    int64_t stride = 1;
    for (const StepSeq& q : step.seqs) {
      stride = std::max<int64_t>(
          stride, static_cast<int64_t>(kv.pages(q.st->id, st.kind, st.owner).size()));
    }
    where.emplace_back(flat.size(), static_cast<int32_t>(stride));
    for (const StepSeq& q : step.seqs) {
      const std::span<const int32_t> pages = kv.pages(q.st->id, st.kind, st.owner);
      for (int64_t j = 0; j < stride; ++j) {
        flat.push_back(j < static_cast<int64_t>(pages.size()) ? pages[static_cast<size_t>(j)]
                                                              : (pages.empty() ? 0 : pages[0]));
      }
    }
  }
  const int32_t* dev = upload<int32_t>("page_lists", flat);
  std::vector<PagedTable> out;
  for (size_t k = 0; k < tables.size(); ++k)
    out.push_back(paged(tables[k], dev + where[k].first, where[k].second));
  return out;
}

void CudaModel::gemm_q(const uint8_t* xq, const uint8_t* xs, int64_t m, const DevFp8& w,
                       void* out) {
  if (exact_) {  // fp32 only
    LinearExactParams p;
    p.xq = xq;
    p.xs = xs;
    p.format = ExactWeightFormat::kFp8Block;
    p.weight = w.w;
    p.weight_scale = w.s;
    p.bn = p.bk = w.block;
    p.m = m;
    p.n = w.n;
    p.k = w.k;
    p.y = static_cast<float*>(out);
    linear_exact(p, ls_);
    after("linear_exact");
    return;
  }
  const Fp8GemmPlan plan =
      plan_fp8_gemm(m, w.n, w.k, w.block, info_.sm_count, info_.sm_major, info_.sm_minor);
  Fp8GemmParams p;
  p.xq = xq;
  p.xq_scale = xs;
  p.weight = w.w;
  p.weight_scale = w.s;
  p.m = m;
  p.n = w.n;
  p.k = w.k;
  p.block = w.block;
  p.out = out;
  p.out_dtype = act_ == ActPrecision::kBF16 ? Fp8OutDtype::kBf16 : Fp8OutDtype::kF32;
  fp8_gemm(p, plan, ls_);
  after("fp8_gemm");
}

void CudaModel::gemm_x(const void* x, int64_t m, const DevFp8& w, void* out) {
  // act_quant (bit-exact vs the CPU's), then the GEMM of the quantised rows.
  ActQuantParams q;
  q.x = x;
  q.codes = buf<uint8_t>("gemm.xq", m * w.k);
  q.scales = buf<uint8_t>("gemm.xs", m * w.k / kActBlock);
  q.rows = m;
  q.dim = w.k;
  q.block = kActBlock;
  q.precision = act_;
  act_quant(q, ls_);
  after("act_quant");
  gemm_q(q.codes, q.scales, m, w, out);
}

void CudaModel::gemv_bf16(const void* x, int64_t m, const DevBf16& w, float* out) {
  if (exact_) {  // fp32 activations only
    LinearExactParams p;
    p.x = static_cast<const float*>(x);
    p.format = ExactWeightFormat::kBf16;
    p.weight = reinterpret_cast<const uint8_t*>(w.w);
    p.m = m;
    p.n = w.n;
    p.k = w.k;
    p.y = out;
    linear_exact(p, ls_);
    after("linear_exact");
    return;
  }
  LmHeadParams p;
  p.x = x;
  p.x_precision = act_;
  p.weight = w.w;
  p.logits = out;
  p.rows = m;
  p.vocab = w.n;
  p.dim = w.k;
  lm_head(p, ls_);
  after("lm_head");
}

void CudaModel::norm_quant(const void* x, int64_t rows, int64_t dim, const float* weight, void* y,
                           uint8_t* codes, uint8_t* scales, uint8_t* codes_interleaved) {
  RmsNormQuantParams p;
  p.norm.x = x;
  p.norm.weight = weight;
  p.norm.y = y;
  p.norm.rows = rows;
  p.norm.dim = dim;
  p.norm.eps = static_cast<float>(cfg_.rms_norm_eps);
  p.norm.precision = act_;
  p.codes = codes;
  p.scales = scales;
  p.block = kActBlock;
  p.codes_interleaved = codes_interleaved;
  rms_norm_act_quant(p, ls_);
  after("rms_norm_act_quant");
}

void CudaModel::rope(void* x, int64_t rows, int64_t heads, int64_t head_dim, const float* freqs,
                     bool inverse) {
  RopeApplyParams p;
  p.x = x;
  p.positions = buf<int64_t>("positions", rows);
  p.freqs = freqs;
  p.rows = rows;
  p.heads = heads;
  p.head_dim = head_dim;
  p.rope_dim = cfg_.rope_head_dim;
  p.inverse = inverse;
  p.precision = act_;
  apply_rope(p, ls_);
  after("apply_rope");
}

void CudaModel::after(const char* op, int64_t block) {
  mark_op(op);
  if (!sync_check_) return;
  if (block < 0) block = cur_block_;
  const cudaError_t e = cudaStreamSynchronize(stream_.get());
  if (e != cudaSuccess) {
    DI_FAIL("CUDA forward: {} (block {}) failed: {} ({})", op, block, cudaGetErrorName(e),
            cudaGetErrorString(e));
  }
}

void CudaModel::trace_dev(int64_t block, std::string_view name, const void* dev,
                          std::initializer_list<int64_t> shape, ActPrecision p) {
  if (tracer_ == nullptr) return;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  const bool bf16 = p == ActPrecision::kBF16;
  std::vector<uint8_t> host(static_cast<size_t>(n) * (bf16 ? 2 : 4));
  DI_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), dev, host.size(), cudaMemcpyDeviceToHost, stream_.get()));
  stream_.synchronize();
  std::vector<double> wide(static_cast<size_t>(n));
  for (size_t k = 0; k < wide.size(); ++k) {
    if (bf16) {
      uint16_t b = 0;
      std::memcpy(&b, host.data() + 2 * k, 2);
      wide[k] = bf16_to_float(b);
    } else {
      float f = 0;
      std::memcpy(&f, host.data() + 4 * k, 4);
      wide[k] = f;
    }
  }
  // The CPU's names (Model::block_name): draft stages are "dspark.layer.<stage>".
  const std::string full = block < 0 ? std::string(name)
                           : block < cfg_.num_layers
                               ? fmt::format("layer.{}.{}", block, name)
                               : fmt::format("dspark.layer.{}.{}", block - cfg_.num_layers, name);
  tracer_->record(full, wide, shape);
}

void CudaModel::round_to_act(const float* src, void* dst, int64_t count) {
  ConvertParams c;
  c.src = src;
  c.src_precision = ActPrecision::kF32;
  c.dst = dst;
  c.dst_precision = act_;
  c.n = count;
  convert_values(c, ls_);
  after("convert_values");
}

void CudaModel::embed_rows(const std::vector<int64_t>& ids) {
  const int64_t R = static_cast<int64_t>(ids.size()), D = cfg_.hidden_size, hc = cfg_.hc_mult;
  EmbeddingParams ep;
  ep.table = embed_;
  ep.ids = upload<int64_t>("ids", ids);
  ep.out = act("h", R * hc * D);
  ep.rows = R;
  ep.vocab = cfg_.vocab_size;
  ep.dim = D;
  ep.copies = hc;
  ep.precision = act_;
  embedding_gather(ep, stream_.get());
  after("embedding_gather");
  std::vector<float> pre0(static_cast<size_t>(R * hc), 0.0f);
  for (int64_t r = 0; r < R; ++r)
    pre0[static_cast<size_t>(r * hc)] = 1.0f;
  upload<float>("pre_mix", pre0);
}

void CudaModel::norm_rows(const void* x, void* y, int64_t rows, const float* weight,
                          const char* op) {
  RmsNormParams np;
  np.x = x;
  np.weight = weight;
  np.y = y;
  np.rows = rows;
  np.dim = cfg_.hidden_size;
  np.eps = static_cast<float>(cfg_.rms_norm_eps);
  np.precision = act_;
  rms_norm(np, ls_);
  after(op);
}

ForwardResult CudaModel::forward(std::span<const SequenceChunk> chunks) {
  DI_CUDA_CHECK(cudaSetDevice(cuda_.device));
  ForwardResult res;
  res.logits.resize(chunks.size());
  res.main_hidden.resize(chunks.size());
  res.all_logits.resize(chunks.size());
  if (chunks.empty()) return res;
  stamp(step_enter_);
  Step step;
  forward_step(step, chunks, res);
  if (cuda_.time_blocks) {
    auto ms = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    step_phase_ms_ = {ms(step_enter_, step_checked_),
                      ms(step_checked_, step_prev_synced_),
                      ms(step_prev_synced_, step_tables_begin_),
                      ms(step_tables_begin_, step_tables_end_),
                      ms(step_tables_end_, block_host_.front()),
                      ms(block_host_.front(), block_host_.back()),
                      ms(block_host_.back(), step_synced_),
                      ms(step_synced_, std::chrono::steady_clock::now())};
  }
  return res;
}

}  // namespace di::v41::gpu

namespace di {

std::unique_ptr<ForwardModel> load_cuda_forward_model(const std::filesystem::path& model_dir,
                                                      const ForwardOptions& options,
                                                      const CudaForwardOptions& cuda,
                                                      std::optional<CompressedTokenMap> token_map) {
  DI_CHECK(cuda.device >= 0 && cuda.device < cuda_device_count(),
           "CUDA backend: device {} requested, {} CUDA device(s) present", cuda.device,
           cuda_device_count());
  ModelConfig cfg = load_model_config(model_dir);
  auto ckpt = open_v41_checkpoint(model_dir, cfg, "CUDA");
  token_map = resolve_engram_token_map(cfg, model_dir, std::move(token_map));
  return std::make_unique<v41::gpu::CudaModel>(std::move(ckpt), std::move(cfg), options, cuda,
                                               std::move(token_map));
}

std::vector<CudaOpTime> cuda_forward_op_times(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::gpu::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_op_times: not a CUDA forward model");
  return m->op_times();
}

void cuda_forward_reset_op_times(ForwardModel& model) {
  auto* m = dynamic_cast<v41::gpu::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_reset_op_times: not a CUDA forward model");
  m->reset_op_times();
}

std::vector<double> cuda_forward_block_ms(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::gpu::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_block_ms: not a CUDA forward model");
  return m->block_ms();
}

std::vector<double> cuda_forward_step_phase_ms(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::gpu::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_step_phase_ms: not a CUDA forward model");
  return m->step_phase_ms();
}

std::vector<double> cuda_forward_block_host_ms(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::gpu::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_block_host_ms: not a CUDA forward model");
  return m->block_host_ms();
}

}  // namespace di
