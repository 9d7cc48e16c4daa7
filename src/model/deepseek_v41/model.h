#pragma once

// The DeepSeek-V4.1 forward pass on the CPU reference backend, faithful to the official
// `inference/model.py` (revision dba1be0a): CSA2 attention with shared KV/top-k, Engram,
// single-pass mHC, MoE, DSpark drafting. T = float (fp32, and bf16: fp32 arithmetic with the
// reference's bf16 tensors rounded where they are produced) or double (fp64 validation).
//
// Generalisations over the reference (which supports one prefill chunk at position 0, then
// one-token decode): any chunk length at any position; window entries come from the ring for
// positions before the chunk; compressor tails carry partial groups; index visibility is
// floor((pos + 1) / ratio) per query row. With the `intended` index-key behaviour any split of a
// sequence into chunks gives the same per-position arithmetic.

#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"
#include "engram/hash_params.h"
#include "engram/token_map.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41/state.h"
#include "model/deepseek_v41/weights.h"
#include "model/forward_api.h"
#include "model/trace.h"

namespace di::v41 {

// act_quant block of V4.1 activations before FP8 GEMMs / the KV cache (fp8_block_size).
inline constexpr int kActBlock = 32;

// RoPE of a block kind: ratio-0 blocks rope_theta without YaRN; compressed blocks
// compress_rope_theta with the config's YaRN scaling (shared by the CPU and CUDA forwards).
cpu::RopeParams rope_params(const ModelConfig& c, bool compressed);

template <typename T>
class Model final : public ForwardModel {
 public:
  Model(std::shared_ptr<const Checkpoint> ckpt, ModelConfig cfg, ForwardOptions opts,
        std::optional<CompressedTokenMap> token_map);

  std::unique_ptr<SequenceState> new_sequence() const override;
  ForwardResult forward(std::span<const SequenceChunk> chunks) override;
  void dspark_prefill(SequenceState& state,
                      const std::vector<std::vector<double>>& main_hidden_rows) override;
  DraftResult dspark_step(SequenceState& state, int64_t input_id,
                          const std::vector<double>& main_hidden_row) override;
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  void set_tracer(ForwardTracer* tracer) override { tracer_ = tracer; }

 private:
  using Vec = std::vector<T>;
  // Per-forward values handed from sources to consumers (the reference's shared runtime).
  struct Shared {
    std::vector<std::vector<int32_t>> topk;        // per query row: compressed positions or -1
    std::vector<std::vector<uint8_t>> candidates;  // per query row: pool mask over positions
    std::span<const uint8_t> image_mask;           // [rows] image-span rows; empty = text
  };

  // One sequence chunk through the backbone: last-row logits, the DSpark taps, and the logits
  // of every row when `all_logits` is given.
  void forward_chunk(SequenceStateT<T>& st, std::span<const int64_t> ids,
                     std::span<const uint8_t> image_mask, std::vector<double>& logits,
                     std::vector<std::vector<double>>& taps, std::vector<double>* all_logits);
  // Block i on stream h [S, hc, D]; pre_mix [S, hc] in/out.
  void block_forward(int64_t i, SequenceStateT<T>& st, int64_t start, Vec& h, Vec& pre_mix,
                     Shared& shared, const Vec* draft_main_x);
  // Attention sublayer of backbone block i: x [S, D] -> [S, D].
  Vec attention(int64_t i, SequenceStateT<T>& st, int64_t start, const Vec& x, Shared& shared);
  // DSpark attention of draft block i: block rows x [bs, D] at positions p+1.., main_x [1, D].
  Vec dspark_attention(int64_t i, SequenceStateT<T>& st, int64_t p, const Vec& x,
                       const Vec& main_x);
  // Indexer of index source i: compressed positions per query row (-1 masked).
  std::vector<std::vector<int32_t>> indexer(int64_t i, SequenceStateT<T>& st, int64_t start,
                                            int64_t rows, const Vec& x, const Vec& qr,
                                            Shared& shared);
  // Compressor of kv source i: appends completed latents (pre-RoPE) with their group index.
  void compress(int64_t i, SequenceStateT<T>& st, int64_t start, const Vec& x, Vec& latents,
                std::vector<int64_t>& groups);
  Vec moe(int64_t i, const Vec& x, std::span<const uint8_t> image_mask);
  Vec expert(const ExpertWeights& w, const Vec& x, const T* weight);
  void engram(int64_t i, const std::vector<int64_t>& hashes, int64_t slot, Vec& h,
              std::span<const uint8_t> image_mask);
  Vec main_x_of(const std::vector<double>& main_hidden_row) const;
  // Attention pieces shared by the backbone and the DSpark stages, for `rows` rows at positions
  // first_pos..: qr = q_norm(wq_a x) and q = RoPE(wq_b qr); the window K=V (kv_norm(wkv x),
  // RoPE, FP8 over all head_dim values); the output (inverse RoPE on o, grouped wo_a, wo_b).
  void queries(const BlockWeights<T>& w, const Vec& x, int64_t rows, int64_t first_pos,
               const cpu::RopeTable<T>& rope, Vec& qr, Vec& q) const;
  Vec window_kv(const BlockWeights<T>& w, const Vec& x, int64_t rows, int64_t first_pos,
                const cpu::RopeTable<T>& rope) const;
  Vec attention_output(int64_t i, Vec& o, int64_t rows, int64_t first_pos,
                       const cpu::RopeTable<T>& rope) const;
  // act_quant + FP8/FP4 GEMM; the output is an activation (bf16 in the bf16 precision).
  Vec linear_q(const Vec& x, int64_t rows, const WeightRef& w) const;
  // Plain GEMM with fp32 output (fp32-declared weights: router, head, compressor pooling).
  Vec linear(const Vec& x, int64_t rows, const WeightRef& w) const;
  // Plain GEMM over bf16-declared weights; the output is an activation (rounded like linear_q).
  Vec linear_act(const Vec& x, int64_t rows, const WeightRef& w) const;
  Vec head_logits(const Vec& x, int64_t rows) const;
  const cpu::RopeTable<T>& rope_for(int64_t block) const;
  // The bf16 precision's rounding of a tensor the reference keeps in bf16 (no-op otherwise).
  void rb(std::span<T> v) const {
    if (bf16_) cpu::round_bf16(v);
  }
  // RMSNorm in place, its output an activation.
  void norm(Vec& x, int64_t rows, int64_t dim, const Vec& weight) const;

  // Tracing (house rule 6, names of fixtures TRACE.md): each call is a null-pointer test unless
  // a tracer is installed; values are copies, so tracing never changes the arithmetic. Block
  // names are "layer.<i>.<name>" for backbone blocks and "dspark.layer.<s>.<name>" for draft
  // stages; forward-level names are used as given.
  bool tracing() const { return tracer_ != nullptr; }
  void trace(std::string_view name, std::span<const T> values,
             std::initializer_list<int64_t> shape) const {
    if (tracer_ != nullptr) emit(std::string(name), values, shape);
  }
  void trace_block(int64_t block, std::string_view name, std::span<const T> values,
                   std::initializer_list<int64_t> shape) const {
    if (tracer_ != nullptr) emit(block_name(block, name), values, shape);
  }
  void trace_block_ids(int64_t block, std::string_view name, std::span<const int64_t> values,
                       std::initializer_list<int64_t> shape) const {
    if (tracer_ != nullptr) tracer_->record_ids(block_name(block, name), values, shape);
  }
  std::string block_name(int64_t block, std::string_view name) const;
  void emit(const std::string& name, std::span<const T> values,
            std::initializer_list<int64_t> shape) const;

  std::shared_ptr<const Checkpoint> ckpt_;
  ModelConfig cfg_;
  ForwardOptions opts_;
  bool bf16_ = false;  // Precision::kBf16 (T = float): activations rounded to bf16
  ModelWeights<T> w_;
  std::optional<CompressedTokenMap> token_map_;
  std::optional<EngramHashParams> engram_params_;
  cpu::RopeTable<T> rope_plain_;       // ratio-0 blocks: rope_theta, no YaRN
  cpu::RopeTable<T> rope_compressed_;  // ratio > 0 blocks: compress_rope_theta + YaRN
  ForwardTracer* tracer_ = nullptr;    // not owned; nullptr: no tracing
};

}  // namespace di::v41
