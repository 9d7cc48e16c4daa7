// engine_step_bench: the engine's own host time per decode step — scheduling, cache bookkeeping,
// the sampling hand-off, detokenization, stop checks and output records — with a forward that
// costs nothing: a stub model that "samples" in the backend (SequenceChunk::sampling, as the CUDA
// backend does) by returning pseudo-random token ids. That host time is added to every GPU step
// (the engine is synchronous), so it is compared with the GPU step it rides on. The V4.1-Flash
// config and state layout, the bundled V4.1 tokenizer (real detokenization of the ids).
//
// Usage: engine_step_bench [batch ...]   (default: 1 64 256)

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "config/model_config.h"
#include "engine/bundled_tokenizer.h"
#include "engine/engine_core.h"
#include "model/forward_api.h"
#include "model/layer_plan.h"
#include "model/model_stats.h"

namespace {

class StubState : public di::SequenceState {
 public:
  int64_t num_tokens() const override { return tokens; }
  int64_t tokens = 0;
};

// Samples every chunk that comes with its sampling: an id from a hash of (seed, position) among
// ordinary BPE ids; never returns logits (the engine must hand over sampling).
class StubModel : public di::ForwardModel {
 public:
  explicit StubModel(int64_t vocab) : vocab_(vocab) {}
  std::unique_ptr<di::SequenceState> new_sequence() const override {
    return std::make_unique<StubState>();
  }
  di::ForwardResult forward(std::span<const di::SequenceChunk> chunks) override {
    di::ForwardResult r;
    r.logits.resize(chunks.size());
    r.main_hidden.resize(chunks.size());
    r.all_logits.resize(chunks.size());
    r.sampled.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      static_cast<StubState*>(chunks[i].state)->tokens +=
          static_cast<int64_t>(chunks[i].token_ids.size());
      const di::ChunkSampling* s = chunks[i].sampling;
      if (s == nullptr) continue;
      uint64_t h = s->row.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(s->row.position);
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 32;
      di::SampleOutcome o;
      o.result.token_id = 3 + static_cast<int64_t>(h % 120000);
      r.sampled[i] = o;
    }
    return r;
  }
  void dspark_prefill(di::SequenceState&, const std::vector<std::vector<double>>&) override {}
  di::DraftResult dspark_step(di::SequenceState&, int64_t, const std::vector<double>&) override {
    return {};
  }
  int64_t vocab_size() const override { return vocab_; }

 private:
  int64_t vocab_;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches;
  for (int i = 1; i < argc; ++i)
    batches.push_back(std::atoll(argv[i]));
  if (batches.empty()) batches = {1, 64, 256};
  try {
    const di::ModelConfig cfg =
        di::load_model_config_file(std::string(DI_SOURCE_DIR) + "/configs/v41-flash.json");
    const di::StateBytes sb = di::compute_state_bytes(cfg, di::build_layer_plan(cfg));
    const di::ResolvedTokenizer tok = di::resolve_tokenizer("/nonexistent", cfg.family);
    std::printf("%6s %14s %14s %12s\n", "batch", "us/step", "us/sequence", "steps timed");
    for (const int64_t batch : batches) {
      StubModel model(cfg.vocab_size);
      di::EngineCoreConfig ec;
      ec.scheduler.max_num_seqs = batch;
      ec.scheduler.max_num_batched_tokens = 8192;
      ec.scheduler.max_model_len = cfg.max_position_embeddings;
      ec.cache.memory_budget_bytes = 64ull << 30;
      di::EngineCore core(model, tok.tokenizer, cfg, sb, ec);
      constexpr int64_t kPrompt = 128, kOutput = 400;
      for (int64_t r = 0; r < batch; ++r) {
        di::NewRequest q;
        q.request_id = std::to_string(r);
        for (int64_t i = 0; i < kPrompt; ++i)
          q.prompt_token_ids.push_back(3 + (i * 7919 + r * 104729) % 120000);
        q.params.temperature = 1.0;
        q.params.ignore_eos = true;
        q.params.max_tokens = kOutput;
        core.add_request(std::move(q));
      }
      // Prefill steps and the first decode steps untimed; then steady decode.
      for (int i = 0; i < 40; ++i)
        core.step();
      DI_CHECK(core.num_unfinished() == static_cast<size_t>(batch),
               "{} of {} requests still running after the warm-up steps", core.num_unfinished(),
               batch);
      const int64_t timed = 300;
      const int64_t computed_before = core.totals().computed_tokens;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < timed; ++i)
        core.step();
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          static_cast<double>(timed);
      DI_CHECK(core.num_unfinished() == static_cast<size_t>(batch) &&
                   core.totals().computed_tokens - computed_before == batch * timed,
               "the timed steps did not decode every request ({} running, {} tokens computed)",
               core.num_unfinished(), core.totals().computed_tokens - computed_before);
      std::printf("%6lld %14.1f %14.2f %12lld\n", static_cast<long long>(batch), us,
                  us / static_cast<double>(batch), static_cast<long long>(timed));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
