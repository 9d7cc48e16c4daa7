// The FFN side of one block on the GPU: router, routed and shared experts, combine; and the
// Engram layers' row gathers and mix (cuda_model_impl.h).

#include "model/deepseek_v41/cuda_model_impl.h"

namespace di::v41::gpu {

MoeSwigluQuantParams CudaModel::swiglu_quant_params(const void* gu, int64_t pairs, int64_t inter,
                                                    const std::string& tag) {
  MoeSwigluQuantParams q;
  q.gu = gu;
  q.pairs = pairs;
  q.inter = inter;
  q.limit = static_cast<float>(cfg_.swiglu_limit);
  q.precision = act_;
  q.codes = buf<uint8_t>(tag + ".hq", pairs * inter);
  q.scales = buf<uint8_t>(tag + ".hs", pairs * inter / kActBlock);
  return q;
}

void CudaModel::moe(int64_t i, int64_t S) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const LayerPlan& p = host_.blocks[static_cast<size_t>(i)].plan;
  const int64_t D = cfg_.hidden_size, inter = cfg_.moe_intermediate_size;
  const auto E = static_cast<int32_t>(p.n_routed_experts);
  const auto K = static_cast<int32_t>(p.num_experts_per_tok);
  const int64_t pairs = S * K;
  const uint8_t* xq = buf<uint8_t>("xq", S * D);
  const uint8_t* xs = buf<uint8_t>("xs", S * D / kActBlock);
  // Shared expert: w1 | w3 in one FP8 GEMM, SwiGLU (weight 1) -> act_quant, w2, on the side
  // stream: it needs only the normed input and runs beside the routed chain, whose expert GEMM
  // leaves SMs idle at decode batches (joined before the combine).
  const bool fork = side_ok();
  if (fork) fork_side();
  const int64_t Is = w.shared_w2.k;
  void* sgu = act("moe.shared.gu", S * 2 * Is);
  gemm_q(xq, xs, S, w.shared_w13, sgu);
  const MoeSwigluQuantParams ss = swiglu_quant_params(sgu, S, Is, "moe.shared");
  moe_swiglu_quant(ss, ls_);
  after("moe_swiglu_quant");
  void* so = act("moe.shared.out", S * D);
  gemm_q(ss.codes, ss.scales, S, w.shared_w2, so);
  if (fork) end_side();
  // Router: gate logits (bf16 weights, fp32), top-k with the (VL) bias, routing weights.
  float* logits = buf<float>("moe.logits", S * E);
  gemv_bf16(act("xn", S * D), S, w.gate, logits);  // fp32 router (x.float())
  MoeRouteParams rp;
  rp.logits = logits;
  rp.bias = w.gate_bias;
  rp.bias_vl = w.gate_bias_vl;
  rp.image_mask = image_rows_ ? buf<uint8_t>("image_mask", S) : nullptr;
  rp.ids = buf<int32_t>("moe.ids", pairs);
  rp.weights = buf<float>("moe.weights", pairs);
  rp.rows = S;
  rp.experts = E;
  rp.topk = K;
  rp.gate_temp = static_cast<float>(cfg_.gate_temp);
  rp.norm_topk_prob = cfg_.norm_topk_prob;
  rp.route_scale = static_cast<float>(cfg_.routed_scaling_factor);
  MoeExpertTilesParams tp;
  tp.experts = E;
  tp.pairs = pairs;
  tp.tile_tokens = moe_expert_tile_tokens(E, pairs);
  const int64_t tiles = moe_expert_tile_bound(E, pairs, tp.tile_tokens);
  tp.tiles = buf<MoeExpertTile>("moe.tiles", tiles);
  MoePermuteParams pp;
  pp.ids = rp.ids;
  pp.rows = S;
  pp.topk = K;
  pp.experts = E;
  pp.offsets = buf<int32_t>("moe.offsets", E + 1);
  pp.pair_index = buf<int32_t>("moe.pair_index", pairs);
  pp.pair_pos = buf<int32_t>("moe.pair_pos", pairs);
  if (pairs > kMoePermuteCountMaxPairs) {  // the radix sort's scratch (a host query of CUB)
    pp.workspace_bytes = moe_permute_workspace_bytes(S, K, E);
    pp.workspace = buf("moe.permute.ws", pp.workspace_bytes);
  }
  pp.tiles = tp.tiles;  // the counting permutation writes them too (decode steps)
  pp.tile_tokens = tp.tile_tokens;
  pp.tile_bound = tiles;
  // Decode steps route and permute in one launch; otherwise the router, then the permutation.
  const bool fused = moe_route_permute(rp, pp, stream_.get());
  bool tiles_done = fused && pp.tiles != nullptr;  // the counting permutation writes them
  if (fused) {
    after("moe_route_permute");
  } else {
    moe_route(rp, stream_.get());
    after("moe_route");
    tiles_done = moe_permute(pp, stream_.get());
    after("moe_permute");
  }
  tp.offsets = pp.offsets;
  if (!tiles_done) {
    moe_expert_tiles(tp, stream_.get());
    after("moe_expert_tiles");
  }
  // Routed experts: w1 | w3 over the gathered token rows, SwiGLU * routing weight -> act_quant,
  // w2 over the pairs. The tensor-core GEMM reads its activations in the interleaved K order.
  auto expert_gemm = [&](const uint8_t* aq, const uint8_t* as, const int32_t* pair_index,
                         const Fp4ExpertMatrix* weights, int mats, int64_t n, int64_t k, void* out,
                         bool tiles_early) {
    if (exact_) {
      GroupedLinearExactParams g;
      g.xq = aq;
      g.xs = as;
      g.pair_index = pair_index;
      g.topk = pair_index != nullptr ? K : 1;
      g.tiles = tp.tiles;
      g.tile_count = tiles;
      g.tile_tokens = tp.tile_tokens;
      g.weights = weights;
      g.experts = E;
      g.mats = mats;
      g.n = n;
      g.k = k;
      g.out = static_cast<float*>(out);
      grouped_linear_exact(g, stream_.get());
      after("grouped_linear_exact");
      return;
    }
    MoeExpertGemmParams g;
    g.xq = aq;
    g.xq_scale = as;
    g.pair_index = pair_index;
    g.topk = pair_index != nullptr ? K : 1;
    g.tiles = tp.tiles;
    g.tile_tokens = tp.tile_tokens;
    g.tile_count = tiles;
    g.weights = weights;
    g.experts = E;
    g.mats = mats;
    g.pairs = pairs;
    g.n = n;
    g.k = k;
    g.out = out;
    g.precision = act_;
    g.tiles_early = tiles_early;
    moe_expert_gemm(g, stream_.get());
    after("moe_expert_gemm");
  };
  // The tensor-core GEMM's activation order, written by the FFN norm (block_forward).
  const uint8_t* xa = exact_ ? xq : buf<uint8_t>("moe.xqi", S * D);
  void* gu = act("moe.gu", pairs * 2 * inter);
  expert_gemm(xa, xs, pp.pair_index, w.experts_w13, 2, inter, D, gu, false);
  MoeSwigluQuantParams sq = swiglu_quant_params(gu, pairs, inter, "moe");
  sq.weights = rp.weights;
  sq.pair_index = pp.pair_index;
  sq.interleave = !exact_;
  moe_swiglu_quant(sq, stream_.get());
  after("moe_swiglu_quant");
  void* eo = act("moe.eo", pairs * D);
  // w2 follows moe_swiglu_quant; the tiles were written before it: the weights start early.
  expert_gemm(sq.codes, sq.scales, nullptr, w.experts_w2, 1, D, inter, eo, true);
  // y = routed outputs summed per token in ascending expert id, then + the shared expert.
  if (fork) join_side();
  MoeCombineParams cp;
  cp.expert_out = eo;
  cp.shared = so;
  cp.ids = rp.ids;
  cp.pair_pos = pp.pair_pos;
  cp.y = act("ffn.out", S * D);
  cp.rows = S;
  cp.topk = K;
  cp.dim = D;
  cp.precision = act_;
  moe_combine(cp, stream_.get());
  after("moe_combine");
}

CudaModel::EngramRows CudaModel::start_engram_gather(int64_t i, const std::vector<int64_t>& hashes,
                                                     int64_t S) {
  const BlockWeights<float>& hw = host_.blocks[static_cast<size_t>(i)];
  const int64_t cols = cfg_.engram_hash_columns();
  const int64_t layers = static_cast<int64_t>(cfg_.engram_layer_ids.size());
  const int64_t slot = hw.plan.engram_slot;
  // The hashed table rows of every token, gathered into one staging block.
  std::vector<int64_t> row_ids(static_cast<size_t>(S * cols));
  for (int64_t r = 0; r < S; ++r) {
    std::copy_n(hashes.begin() + (r * layers + slot) * cols, cols, row_ids.begin() + r * cols);
  }
  EngramRows out;
  out.staging = uploads_.allocate(engram_staging_bytes(*hw.engram_table, S * cols));
  const cpu::WeightRef* table = &*hw.engram_table;
  const std::span<uint8_t> dst(reinterpret_cast<uint8_t*>(out.staging.data()), out.staging.size());
  out.gathered = std::async(std::launch::async, [table, ids = std::move(row_ids), dst] {
    gather_engram_rows(*table, ids, dst);
  });
  return out;
}

void CudaModel::engram(int64_t i, EngramRows& rows_in, int64_t S) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
  const int64_t cols = cfg_.engram_hash_columns(), hd = cfg_.engram_head_dim;
  rows_in.gathered.get();  // the gather's error (a row id outside the table), if any
  // The rows are in pinned memory: one queued copy.
  const size_t bytes = rows_in.staging.size();
  uint8_t* staged = buf<uint8_t>("engram.staging", static_cast<int64_t>(bytes));
  DI_CUDA_CHECK(cudaMemcpyAsync(staged, rows_in.staging.data(), bytes, cudaMemcpyHostToDevice,
                                stream_.get()));
  mark_op("engram rows to device");
  EngramDecodeParams dp;
  dp.staging = staged;
  dp.out = act("engram.e", S * cols * hd);
  dp.rows = S * cols;
  dp.cols = hd;
  dp.precision = act_;
  engram_decode_rows(dp, stream_.get());
  after("engram_decode_rows");
  void* kv = act("engram.kv", S * (hc + 1) * D);
  gemm_x(dp.out, S, w.engram_wkv, kv);
  EngramGateMixParams gp;
  gp.h = act("h", S * hc * D);
  gp.kv = kv;
  gp.wqk = w.engram_qk;
  gp.image_mask = image_rows_ ? buf<uint8_t>("image_mask", S) : nullptr;
  gp.rows = S;
  gp.hc = hc;
  gp.dim = D;
  gp.eps = static_cast<float>(cfg_.rms_norm_eps);
  gp.precision = act_;
  engram_gate_mix(gp, stream_.get());
  after("engram_gate_mix");
}

}  // namespace di::v41::gpu
