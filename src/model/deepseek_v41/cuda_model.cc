// The DeepSeek-V4.1 backbone on the GPU: Model<float> (model.cc, attention.cc) step by step, each
// step one launcher of src/kernels/cuda (their parity tests pin each op to the CPU op it replaces).
// Per-step buffers live in a growable scratch set. The sequences' cache (window rings, and per
// kv-source owner the compressed entries and the index keys) lives in one device pool of
// fixed-size pages in the quantised formats of kernels/params/kv_cache.h, laid out and accounted
// by a KvCacheManager (the engine's own layout, so its budget is this pool's size); the ratio-2
// tails are rows of a separate device array. A forward call runs all of its chunks as one batched
// step: every launch covers the rows of every sequence. DSpark drafting (dspark_on_gpu) runs the
// draft stages as further blocks of the same kind over the draft rows, with their rings in the
// same SWA table (dspark_step_gpu, dspark_prefill_gpu at the end of this file).

#include "model/deepseek_v41/cuda_model.h"

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
#include "model/deepseek_v41/model.h"
#include "model/deepseek_v41/weights.h"
#include "model/layer_plan.h"
#include "model/model_stats.h"
#include "model/trace.h"

namespace di::v41 {
namespace {

// Logits of a step up to this size come back through pinned memory (see forward_step).
constexpr size_t kPinnedLogitsMaxBytes = size_t{512} << 20;

size_t round_up(size_t v, size_t a) {
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
  // DSpark drafting on the GPU (dspark_on_gpu) or on the CPU reference: either reads only the
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
  // main_x = main_norm(main_proj(taps)) of the given tap rows into "dspark.main_x".
  void dspark_main_x(const std::vector<const std::vector<double>*>& rows);
  // main_kv of the "dspark.main_x" rows (rows "dspark.main_seq" / "dspark.main_pos", per sequence
  // "dspark.main_end") into the ring of draft stage block i: only accepted context enters a ring.
  void dspark_main_kv(int64_t i, const PagedTable& swa, int64_t rows);
  // The window-KV write of block i's kv rows into `swa`: weights, RoPE, ring and formats set;
  // rows' sequences, positions, ring and chunk outputs left to the caller.
  SwaWriteParams swa_params(int64_t i, const PagedTable& swa, const void* kv, int64_t rows) const;
  // A step's start: the previous step's pinned uploads are free once its work ran.
  void begin_step();
  bool gpu_drafter() const { return cfg_.num_nextn_predict_layers > 0 && cuda_.dspark_on_gpu; }
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
  std::unique_ptr<Model<float>> drafter_;  // DSpark stages on the CPU reference (!dspark_on_gpu)
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
  if (cfg_.num_nextn_predict_layers > 0 && !cuda_.dspark_on_gpu) {
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

CudaSeqState& CudaModel::gpu_draft_state(SequenceState& state) const {
  auto* st = dynamic_cast<CudaSeqState*>(&state);
  DI_CHECK(st != nullptr, "DSpark: sequence state of another model or backend");
  DI_CHECK(st->kv == dkv_, "DSpark: sequence state of another CUDA model");
  DI_CHECK(gpu_drafter(), "DSpark: this model has no draft stages");
  return *st;
}

SequenceState& CudaModel::draft_state(SequenceState& state) const {
  auto* st = dynamic_cast<CudaSeqState*>(&state);
  DI_CHECK(st != nullptr, "DSpark: sequence state of another model or backend");
  DI_CHECK(st->draft != nullptr, "DSpark: this model has no draft stages");
  return *st->draft;
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
  const std::string full = block < 0 ? std::string(name) : fmt::format("layer.{}.{}", block, name);
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

// ---------------------------------------------------------------------------------------------
// One chunk of one sequence.

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

// ---------------------------------------------------------------------------------------------
// DSpark drafting on the GPU (delta spec §4.2; Model::dspark_prefill / dspark_step).

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
  void* mx = act("dspark.main_x", n * D);
  gemm_x(taps, n, draft_.main_proj, mx);  // linear_q: act_quant 32, FP8 GEMM
  norm_rows(mx, mx, n, draft_.main_norm, "rms_norm (main_norm)");
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

void CudaModel::dspark_main_kv(int64_t i, const PagedTable& swa, int64_t rows) {
  const DevBlock& w = blocks_[static_cast<size_t>(i)];
  const int64_t hd = cfg_.head_dim;
  void* kv = act("dspark.main_kv", rows * hd);
  gemm_x(act("dspark.main_x", rows * cfg_.hidden_size), rows, w.wkv, kv);
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
  step.seq = seq;
  step.positions = positions;
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

  // Results into pinned memory, one synchronisation.
  // (Pinned unless the logits are large: see kPinnedLogitsMaxBytes.)
  const size_t logit_bytes = static_cast<size_t>(R * V) * sizeof(float);
  std::vector<float> pageable;
  float* h_logits = nullptr;
  if (logit_bytes <= kPinnedLogitsMaxBytes) {
    h_logits = reinterpret_cast<float*>(uploads_.allocate(logit_bytes, 64).data());
  } else {
    pageable.resize(static_cast<size_t>(R * V));
    h_logits = pageable.data();
  }
  auto* h_drafts = reinterpret_cast<int64_t*>(
      uploads_.allocate(static_cast<size_t>(R) * sizeof(int64_t), 64).data());
  auto* h_conf = reinterpret_cast<float*>(
      uploads_.allocate(static_cast<size_t>(R) * sizeof(float), 64).data());
  DI_CUDA_CHECK(
      cudaMemcpyAsync(h_logits, logits, logit_bytes, cudaMemcpyDeviceToHost, stream_.get()));
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
    for (int64_t r = b * bsz; r < (b + 1) * bsz; ++r) {
      res.draft_ids.push_back(h_drafts[r]);
      res.logits.emplace_back(h_logits + r * V, h_logits + (r + 1) * V);
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

}  // namespace
}  // namespace di::v41

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
  return std::make_unique<v41::CudaModel>(std::move(ckpt), std::move(cfg), options, cuda,
                                          std::move(token_map));
}

std::vector<CudaOpTime> cuda_forward_op_times(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_op_times: not a CUDA forward model");
  return m->op_times();
}

void cuda_forward_reset_op_times(ForwardModel& model) {
  auto* m = dynamic_cast<v41::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_reset_op_times: not a CUDA forward model");
  m->reset_op_times();
}

std::vector<double> cuda_forward_block_ms(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_block_ms: not a CUDA forward model");
  return m->block_ms();
}

std::vector<double> cuda_forward_step_phase_ms(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_step_phase_ms: not a CUDA forward model");
  return m->step_phase_ms();
}

std::vector<double> cuda_forward_block_host_ms(const ForwardModel& model) {
  const auto* m = dynamic_cast<const v41::CudaModel*>(&model);
  DI_CHECK(m != nullptr, "cuda_forward_block_host_ms: not a CUDA forward model");
  return m->block_host_ms();
}

}  // namespace di
