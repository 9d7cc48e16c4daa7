#pragma once

// Internal to the CUDA forward of DeepSeek-V4.1 (cuda_model.h is the interface): the
// device-side weight and cache structures, the step description and the CudaModel class,
// whose members are defined in cuda_model.cc (set-up, weights, tables, shared launch
// helpers), cuda_model_step.cc (a forward step and one block), cuda_model_attention.cc
// (attention, compressor, indexer), cuda_model_ffn.cc (MoE, Engram) and
// cuda_model_dspark.cc (the GPU drafter). Design: docs/design/cuda_forward.md.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_spin.h"
#include "backend/cuda/pinned_arena.h"
#include "common/bf16.h"
#include "common/check.h"
#include "engram/hash_params.h"
#include "engram/ngram_hash.h"
#include "engram/row_gather.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention/sparse_attention.cuh"
#include "kernels/cuda/engram/engram.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/indexer/indexer.cuh"
#include "kernels/cuda/kv_write/kv_write.cuh"
#include "kernels/cuda/linear_exact/linear_exact.cuh"
#include "kernels/cuda/mhc/mhc.cuh"
#include "kernels/cuda/moe/moe_expert.cuh"
#include "kernels/cuda/moe/moe_route.cuh"
#include "kernels/cuda/ops/act_quant.cuh"
#include "kernels/cuda/ops/embedding.cuh"
#include "kernels/cuda/ops/lm_head.cuh"
#include "kernels/cuda/ops/markov.cuh"
#include "kernels/cuda/ops/rmsnorm.cuh"
#include "kernels/cuda/ops/rope.cuh"
#include "kernels/cuda/ops/scale.cuh"
#include "kernels/cuda/wo_a/wo_a.cuh"
#include "kv_cache/kv_cache_manager.h"
#include "model/cuda_chunk_sampler.h"
#include "model/deepseek_v41/cpu_model.h"
#include "model/deepseek_v41/cuda_model.h"
#include "model/deepseek_v41/model.h"
#include "model/deepseek_v41/weights.h"
#include "model/layer_plan.h"
#include "model/model_stats.h"
#include "model/trace.h"

namespace di::v41::gpu {

// Logits of a step up to this size come back through pinned memory (see forward_step).
inline constexpr size_t kPinnedLogitsMaxBytes = size_t{512} << 20;

inline size_t round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

// Device copies of the weights, bump-allocated from large chunks (few cudaMallocs).
class WeightPool {
 public:
  const void* upload(std::span<const std::byte> bytes, const std::string& tag) {
    const size_t need = round_up(std::max<size_t>(bytes.size(), 1), 256);
    if (chunks_.empty() || used_ + need > chunks_.back().size()) {
      chunks_.emplace_back(std::max(need, kChunk), "weights (" + tag + ")");
      used_ = 0;
    }
    auto* dst = static_cast<std::byte*>(chunks_.back().data()) + used_;
    used_ += need;
    if (!bytes.empty()) {
      DI_CUDA_CHECK(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    }
    return dst;
  }
  template <typename T>
  const T* upload_vec(const std::vector<T>& v, const std::string& tag) {
    return static_cast<const T*>(upload(std::as_bytes(std::span<const T>(v)), tag));
  }

 private:
  static constexpr size_t kChunk = size_t{256} << 20;
  std::vector<DeviceBuffer> chunks_;
  size_t used_ = 0;
};

struct DevFp8 {  // FP8 e4m3 [n, k] with one UE8M0 scale per block x block
  const uint8_t* w = nullptr;
  const uint8_t* s = nullptr;
  int64_t n = 0, k = 0;
  int block = 0;
};
struct DevBf16 {  // bf16 [n, k]
  const uint16_t* w = nullptr;
  int64_t n = 0, k = 0;
};
struct DevHc {
  const uint32_t* fn_packed = nullptr;
  const float* scale = nullptr;
  const float* base = nullptr;
};

struct DevBlock {
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *kv_norm = nullptr;
  const float *attn_sink = nullptr, *comp_norm = nullptr, *idx_k_norm = nullptr;
  const float *gate_bias = nullptr, *gate_bias_vl = nullptr, *engram_qk = nullptr;
  DevHc hc_attn, hc_ffn;
  DevFp8 wq_a, wq_b, wkv, wo_a, wo_b, idx_wq_b, shared_w13, shared_w2, engram_wkv;
  DevBf16 comp_wkv, comp_wgate, idx_weights_proj, idx_wk, gate;
  const Fp4ExpertMatrix* experts_w13 = nullptr;  // [2 * E]: w1 of every expert, then w3
  const Fp4ExpertMatrix* experts_w2 = nullptr;   // [E]
};

// The device cache of every sequence: the page pool (KvCacheManager bookkeeping, one DeviceBuffer
// of total_pages * page_bytes) and the ratio-2 tail rows. Shared by the model and its sequence
// states, so a state destroyed after the model still returns its pages to live bookkeeping.
struct DeviceKv {
  DeviceKv(const StateBytes& state, const KvCacheConfig& cfg, int64_t tail_row_floats)
      : kv(state, cfg),
        pool(static_cast<size_t>(kv.total_pages() * kv.page_bytes()), "KV cache pages"),
        tail_floats(tail_row_floats) {}
  KvCacheManager kv;
  DeviceBuffer pool;
  int64_t tail_floats = 0;    // floats of one ratio-2 tail row
  DeviceBuffer tails;         // [tail capacity, tail_floats]
  int64_t tail_capacity = 0;  // rows
  std::vector<int32_t> free_tails;
  SeqId next_id = 0;
};

// A sequence on the GPU: its id in the page pool, the host-side state of the forward, and the
// ratio-2 tail row of every ratio-2 owner.
class CudaSeqState final : public SequenceState {
 public:
  explicit CudaSeqState(std::shared_ptr<DeviceKv> dkv) : kv(std::move(dkv)), id(kv->next_id++) {}
  ~CudaSeqState() override {
    // The model synchronizes at the end of every forward: no queued work reads these pages.
    kv->kv.free(id);
    for (int32_t r : tail_row) {
      if (r >= 0) kv->free_tails.push_back(r);
    }
  }
  CudaSeqState(const CudaSeqState&) = delete;
  CudaSeqState& operator=(const CudaSeqState&) = delete;
  int64_t num_tokens() const override { return tokens; }

  std::shared_ptr<DeviceKv> kv;
  SeqId id = 0;
  int64_t tokens = 0;
  EngramHistory engram;
  int64_t last_index_publisher = -1;
  std::unique_ptr<SequenceState> draft;  // the CPU drafter's state (models with DSpark stages)
  int64_t draft_tokens = 0;              // GPU drafter: positions whose main_kv the rings took
  std::vector<int32_t> tail_row;         // per block: ratio-2 tail row, -1 for other blocks
};

// One chunk of a batched step: the sequence, its first position, its rows in the step.
struct StepSeq {
  CudaSeqState* st = nullptr;
  int64_t start = 0;
  int64_t rows = 0;
  int64_t row0 = 0;
  std::span<const int64_t> ids;
  std::span<const uint8_t> image_mask;
};

// The rows of one forward call: the chunks in call order, then per owner block the paged tables
// of the step (table batch row b = chunk b).
struct Step {
  std::vector<StepSeq> seqs;
  int64_t rows = 0;
  PagedTable swa;
  std::map<int64_t, PagedTable> comp, keys;  // by owner block
  std::vector<int32_t> seq;        // per row: table batch row (host copy of the "seq" buffer)
  std::vector<int64_t> positions;  // per row: absolute position
  int64_t batch() const { return static_cast<int64_t>(seqs.size()); }
  // The largest number of compressed entries a sequence of the step sees at ratio `ratio`.
  int64_t max_entries(int64_t ratio) const {
    int64_t m = 0;
    for (const StepSeq& q : seqs)
      m = std::max(m, (q.start + q.rows) / ratio);
    return m;
  }
};

class CudaModel final : public ForwardModel {
 public:
  CudaModel(std::shared_ptr<const Checkpoint> ckpt, ModelConfig cfg, ForwardOptions opts,
            CudaForwardOptions cuda, std::optional<CompressedTokenMap> token_map);

  std::unique_ptr<SequenceState> new_sequence() const override;
  ForwardResult forward(std::span<const SequenceChunk> chunks) override;
  // DSpark drafting on the GPU (drafter kGpu) or on the CPU reference: either reads only the
  // backbone's taps and its own per-stage rings.
  void dspark_prefill(SequenceState& state,
                      const std::vector<std::vector<double>>& main_hidden_rows) override {
    if (drafter_) {
      drafter_->dspark_prefill(draft_state(state), main_hidden_rows);
    } else {
      dspark_prefill_gpu(gpu_draft_state(state), main_hidden_rows);
    }
  }
  DraftResult dspark_step(SequenceState& state, int64_t input_id,
                          const std::vector<double>& main_hidden_row) override {
    if (drafter_) return drafter_->dspark_step(draft_state(state), input_id, main_hidden_row);
    const DraftRequest r{&state, input_id, &main_hidden_row};
    return std::move(dspark_step_gpu({&r, 1}).at(0));
  }
  // The GPU drafter runs the sequences as one batched step (rows stay per sequence).
  std::vector<DraftResult> dspark_steps(std::span<const DraftRequest> requests) override {
    if (drafter_ || requests.empty()) return ForwardModel::dspark_steps(requests);
    return dspark_step_gpu(requests);
  }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  const std::vector<double>& block_ms() const {
    DI_CHECK(cuda_.time_blocks, "cuda_forward_block_ms: the model was loaded without time_blocks");
    return block_ms_;
  }
  const std::vector<double>& block_host_ms() const {
    DI_CHECK(cuda_.time_blocks,
             "cuda_forward_block_host_ms: the model was loaded without time_blocks");
    return block_host_ms_;
  }
  const std::vector<double>& step_phase_ms() const {
    DI_CHECK(cuda_.time_blocks,
             "cuda_forward_step_phase_ms: the model was loaded without time_blocks");
    return step_phase_ms_;
  }
  void set_tracer(ForwardTracer* tracer) override { tracer_ = tracer; }
  std::vector<CudaOpTime> op_times() const {
    DI_CHECK(cuda_.time_ops, "cuda_forward_op_times: the model was loaded without time_ops");
    std::vector<CudaOpTime> out;
    for (const auto& [op, t] : op_totals_)
      out.push_back({op, t.gpu_ms, t.launches, t.host_ms});
    std::sort(out.begin(), out.end(),
              [](const CudaOpTime& a, const CudaOpTime& b) { return a.ms > b.ms; });
    return out;
  }
  void reset_op_times() { op_totals_.clear(); }

 private:
  // Per-forward values handed from sources to consumers (the CPU's Model::Shared).
  struct Shared {
    int32_t topk_width = 0;  // 0: no top-k rows (no compressed entries visible yet)
    int64_t mask_len = -1;   // candidate pool columns (-1: no pool built in this forward)
  };

  SequenceState& draft_state(SequenceState& state) const;
  CudaSeqState& gpu_draft_state(SequenceState& state) const;
  // The GPU drafter (delta spec §4.2; Model::dspark_prefill / dspark_step are the reference).
  void dspark_prefill_gpu(CudaSeqState& st, const std::vector<std::vector<double>>& rows);
  std::vector<DraftResult> dspark_step_gpu(std::span<const DraftRequest> requests);
  // main_x = main_norm(main_proj(taps)) of the given tap rows into "dspark.main_x", with its
  // act_quant in "dspark.main_xq" / "dspark.main_xs" (the stages' wkv input).
  void dspark_main_x(const std::vector<const std::vector<double>*>& rows);
  // main_kv of the quantised main_x rows (rows "dspark.main_seq" / "dspark.main_pos", per sequence
  // "dspark.main_end") into the ring of draft stage block i: only accepted context enters a ring.
  void dspark_main_kv(int64_t i, const PagedTable& swa, int64_t rows);
  // The window-KV write of block i's kv rows into `swa`: weights, RoPE, ring and formats set;
  // rows' sequences, positions, ring and chunk outputs left to the caller.
  SwaWriteParams swa_params(int64_t i, const PagedTable& swa, const void* kv, int64_t rows) const;
  // A step's start: the previous step's pinned uploads are free once its work ran.
  void begin_step();
  bool gpu_drafter() const {
    return cfg_.num_nextn_predict_layers > 0 && cuda_.drafter == DsparkDrafter::kGpu;
  }
  void upload_weights();
  DevFp8 fp8(const WeightRef& w, const std::string& tag, bool wo_a_tiles = false);
  DevBf16 bf16(const WeightRef& w, const std::string& tag);
  const float* f32(const std::vector<float>& v, const std::string& tag) {
    return pool_.upload_vec(v, tag);
  }

  // Named step buffers (grown on demand; stream order makes reuse within a step safe).
  void* buf(const std::string& name, size_t bytes);
  template <typename T>
  T* buf(const std::string& name, int64_t count) {
    return static_cast<T*>(buf(name, static_cast<size_t>(count) * sizeof(T)));
  }
  // Copies host values into the named step buffer (kept alive until the step's sync).
  template <typename T>
  T* upload(const std::string& name, std::span<const T> v);

  // A paged table over the pool for layout table `table` with the step's page lists `pages`
  // ([batch, stride] device int32).
  PagedTable paged(size_t table, const int32_t* pages, int32_t stride) const;
  // Grows every sequence's pages to its new length, uploads the step's page lists and builds the
  // SWA table and the compressed-KV / index-key tables of every owner.
  void build_tables(Step& step);
  // Uploads the page lists of the given layout tables for the step's sequences (one upload) and
  // returns their paged tables, in the order asked.
  std::vector<PagedTable> page_tables(const Step& step, const std::vector<size_t>& tables);

  void forward_step(Step& step, std::span<const SequenceChunk> chunks, ForwardResult& res);
  void block_forward(int64_t i, const Step& step, Shared& shared);
  void attention(int64_t i, const Step& step, Shared& shared);
  // The indexer's per-head weights (xn . idx_weights_proj, scaled) into "index.w": they need
  // only xn, so attention() runs them on its KV branch. xn: the attention input in the
  // activation precision (for the bf16-weight GEMM).
  void index_weights(int64_t i, int64_t rows, const void* xn);
  // The indexer from the quantised qr and index_weights' output. join_kv: wait for the side
  // branch (index keys, weights) just before the scoring, after the query projection.
  void indexer(int64_t i, const Step& step, Shared& shared, bool join_kv);
  void compress(int64_t i, const Step& step, const void* xn);
  void moe(int64_t i, int64_t rows);
  // SwiGLU (clamped at the config's limit) of gu [pairs, 2 * inter] with act_quant into the
  // buffers `tag`.hq / `tag`.hs; the routed experts add their weights, order and layout.
  MoeSwigluQuantParams swiglu_quant_params(const void* gu, int64_t pairs, int64_t inter,
                                           const std::string& tag);
  // An Engram layer's table rows for the step, gathered on a host thread from the step's start
  // (the hashes depend only on the token ids) into pinned staging, so that the gather — page
  // faults into the host-resident tables, milliseconds at batch 64 — overlaps the enqueue and
  // the GPU work of the layers before it instead of stalling the host at the layer.
  struct EngramRows {
    std::span<std::byte> staging;  // pinned (uploads_), valid until the next step's start
    std::future<void> gathered;
  };
  EngramRows start_engram_gather(int64_t i, const std::vector<int64_t>& hashes, int64_t rows);
  void engram(int64_t i, EngramRows& rows_in, int64_t rows);

  // y[m, n] = act_quant(x) . W^T from already-quantised rows / from fp32 rows.
  // Outputs (and gemm_x's input) in the activation precision act_.
  void gemm_q(const uint8_t* xq, const uint8_t* xs, int64_t m, const DevFp8& w, void* out);
  void gemm_x(const void* x, int64_t m, const DevFp8& w, void* out);
  // y[m, n] = x . W^T with bf16 weights, fp32 activations and outputs.
  // x in the activation precision (the kernel widens bf16 exactly; the exact-order path of the
  // fp32 precision reads fp32).
  void gemv_bf16(const void* x, int64_t m, const DevBf16& w, float* out);
  // codes_interleaved (nullable): also the FP4 expert GEMM's activation order.
  void norm_quant(const void* x, int64_t rows, int64_t dim, const float* weight, void* y,
                  uint8_t* codes, uint8_t* scales, uint8_t* codes_interleaved = nullptr);
  void rope(void* x, int64_t rows, int64_t heads, int64_t head_dim, const float* freqs,
            bool inverse);
  // The step's token rows embedded into every hc stream ("h"), the carried pre-mix one-hot on
  // stream 0 ("pre_mix").
  void embed_rows(const std::vector<int64_t>& ids);
  // y = rms_norm(x, weight) over `rows` rows of hidden_size (activation precision; y may be x).
  void norm_rows(const void* x, void* y, int64_t rows, const float* weight, const char* op);
  // Activation buffers (act_ precision), and conversions for the bf16-declared fp32 results
  // (bf16 precision only).
  void* act(const std::string& name, int64_t count) {
    return buf(name, static_cast<size_t>(count) * act_bytes());
  }
  size_t act_bytes() const { return act_ == ActPrecision::kBF16 ? 2 : 4; }
  void round_to_act(const float* src, void* dst, int64_t count);
  const float* freqs_for(int64_t block) const {
    return cfg_.compress_ratios[static_cast<size_t>(block)] > 0 ? freqs_compressed_ : freqs_plain_;
  }

  std::shared_ptr<const Checkpoint> ckpt_;
  ModelConfig cfg_;
  ForwardOptions opts_;
  CudaForwardOptions cuda_;
  DeviceInfo info_;
  ModelWeights<float> host_;  // zero-copy views + small vectors decoded once (CPU binding)
  std::optional<CompressedTokenMap> token_map_;
  std::optional<EngramHashParams> engram_params_;
  std::unique_ptr<Model<float>>
      drafter_;  // DSpark stages on the CPU reference (drafter kCpuReference)
  // The GPU drafter's weights besides its stage blocks (blocks_[num_layers ..]).
  struct DevDraft {
    DevFp8 main_proj;  // mtp.0.main_proj
    const float* main_norm = nullptr;
    const float* norm = nullptr;  // mtp.<last>.norm
    DevBf16 markov_embed, markov_head, confidence;
  };
  DevDraft draft_;
  Stream stream_;
  // The side stream (an independent branch of a layer: the attention's KV side, the shared
  // expert), and the stream the launch helpers use (stream_ except between fork_side() and
  // end_side()).
  Stream side_;
  Event fork_, join_, join_q_;
  cudaStream_t ls_ = nullptr;
  // Side branches run only when no op is timed, synchronised or traced on the main stream.
  bool side_ok() const { return !cuda_.time_ops && !sync_check_ && tracer_ == nullptr; }
  // The side stream waits for the main stream's work so far; the launch helpers then use it.
  void fork_side();
  // The launch helpers go back to the main stream; join_side() makes the main stream wait for
  // the side branch (call it where the branch's results are first read).
  void end_side();
  void join_side();
  // The same for a second branch forked after end_side(), joined separately (`done` records
  // the branch's end).
  void end_side(Event& done);
  void join_side(const Event& done);
  WeightPool pool_;
  std::vector<DevBlock> blocks_;
  const uint16_t* embed_ = nullptr;
  DevBf16 head_;
  const float* final_norm_ = nullptr;
  const float* freqs_plain_ = nullptr;
  const float* freqs_compressed_ = nullptr;
  std::shared_ptr<DeviceKv> dkv_;     // the sequences' device cache
  std::vector<float> tail_init_;      // one ratio-2 tail row: kv slots 0, score slots -inf
  std::map<int64_t, int64_t> owner_;  // owner block -> StateBytes owner index
  std::map<std::string, DeviceBuffer> scratch_;
  // Pinned host memory of this step's async copies: the uploads' sources and the logits'
  // destination (reset at the next step's start).
  PinnedArena uploads_{"CUDA forward host copies"};
  CudaChunkSampler sampler_;  // chunks with SequenceChunk::sampling
  int swa_bytes_ = 0, comp_bytes_ = 0, key_bytes_ = 0;
  bool image_rows_ = false;  // this step has an image mask ("image_mask" buffer)
  // DI_CUDA_SYNC_CHECK=1: synchronize after every op and name the op in any CUDA error (a
  // debugging mode; normally errors surface at the step's final synchronization).
  bool sync_check_ = false;
  bool exact_ = true;  // exact-order linears (see CudaForwardOptions::tensor_core_linears)
  ActPrecision act_ = ActPrecision::kF32;  // activation storage: --precision fp32 | bf16
  MhcStorage mhc_storage() const {
    return act_ == ActPrecision::kBF16 ? MhcStorage::kBf16 : MhcStorage::kF32;
  }
  ForwardTracer* tracer_ = nullptr;  // not owned; nullptr: no tracing
  int64_t cur_block_ = -1;           // the block being launched (error messages)
  std::vector<Event> block_events_;  // time_blocks: [blocks + 2] timing events
  std::vector<double> block_ms_;     // time_blocks: the last chunk's per-block milliseconds
  // time_blocks: host clock at each block event, and the host milliseconds spent enqueuing each
  // block of the last chunk.
  std::vector<std::chrono::steady_clock::time_point> block_host_;
  std::vector<double> block_host_ms_;
  // time_blocks: host clock at forward()'s entry and after the step's synchronisation, and the
  // last forward's host phases (cuda_forward_step_phase_ms).
  std::chrono::steady_clock::time_point step_enter_, step_checked_, step_prev_synced_,
      step_tables_begin_, step_tables_end_, step_synced_;
  std::vector<double> step_phase_ms_;
  void stamp(std::chrono::steady_clock::time_point& t) const {
    if (cuda_.time_blocks) t = std::chrono::steady_clock::now();
  }
  void mark_block(size_t k) {
    if (!cuda_.time_blocks) return;
    block_events_[k].record(stream_.get());
    block_host_[k] = std::chrono::steady_clock::now();
  }
  // time_ops: events after each launch of this step, the op names, and the running totals.
  // The host clock is read before each event: the host time between two marks is what the later
  // op cost to prepare and enqueue.
  std::vector<Event> op_events_;
  std::vector<const char*> op_names_;
  std::vector<std::chrono::steady_clock::time_point> op_host_;
  size_t op_count_ = 0;
  struct OpTotal {
    double gpu_ms = 0, host_ms = 0;
    int64_t launches = 0;
  };
  std::map<std::string, OpTotal> op_totals_;
  void mark_op(const char* op) {
    if (!cuda_.time_ops) return;
    if (op_count_ == op_events_.size()) {
      op_events_.emplace_back(true);
      op_names_.push_back(nullptr);
      op_host_.emplace_back();
    }
    op_host_[op_count_] = std::chrono::steady_clock::now();
    op_events_[op_count_].record(stream_.get());
    op_names_[op_count_++] = op;
  }
  // After the step's last event completed: the time between consecutive events per op.
  void collect_op_times() {
    for (size_t k = 1; k < op_count_; ++k) {
      OpTotal& t = op_totals_[op_names_[k]];
      t.gpu_ms += Event::elapsed_ms(op_events_[k - 1], op_events_[k]);
      t.host_ms += std::chrono::duration<double, std::milli>(op_host_[k] - op_host_[k - 1]).count();
      ++t.launches;
    }
    op_count_ = 0;
  }

  // After each launch: in sync-check mode, wait and name the failing op.
  void after(const char* op, int64_t block = -1);
  // Tracing (model/trace.h names): copies a device fp32 tensor to the tracer (synchronizes).
  void trace_dev(int64_t block, std::string_view name, const void* dev,
                 std::initializer_list<int64_t> shape, ActPrecision p = ActPrecision::kF32);
  void trace_act(int64_t block, std::string_view name, const void* dev,
                 std::initializer_list<int64_t> shape) {
    trace_dev(block, name, dev, shape, act_);
  }
};

template <typename T>
T* CudaModel::upload(const std::string& name, std::span<const T> v) {
  T* dst = buf<T>(name, static_cast<int64_t>(v.size()));
  if (v.empty()) return dst;
  const auto bytes = std::as_bytes(v);
  // From pinned memory the copy is queued like a launch (from pageable memory it would wait for
  // the stream's earlier work); the source stays valid until the step's end.
  const std::span<std::byte> src = uploads_.allocate(bytes.size());
  std::memcpy(src.data(), bytes.data(), bytes.size());
  DI_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), bytes.size(), cudaMemcpyHostToDevice, ls_));
  return dst;
}

}  // namespace di::v41::gpu
