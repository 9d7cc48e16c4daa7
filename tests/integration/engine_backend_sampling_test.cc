// The engine's side of sampling in the backend (SequenceChunk::sampling, ForwardResult::sampled),
// on the CPU: a backend that samples inside its forward — here the host sampler over the CPU
// model's own logits, as the CUDA backend does with the GPU sampler — must give every request
// exactly the tokens and logprobs of the engine sampling the returned logits itself, so the
// inputs the engine hands over (seed, position, prompt and output ids, min_tokens suppression)
// are the ones it samples with. A row the backend reports as failed fails that request only.

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "engine/engine_core.h"
#include "engine/llm_impl.h"
#include "engram/token_map.h"
#include "model/deepseek_v41/cpu_model.h"
#include "model/layer_plan.h"
#include "model/model_stats.h"
#include "sampling/sampler.h"
#include "tests_support/fixture_paths.h"

namespace di {
namespace {

namespace fs = std::filesystem;
using deepinfer::SamplingParams;
using testing_support::kTinyFixtureA;

constexpr uint64_t kFailingSeed = 4242;

// Samples every chunk that comes with its sampling, from the inner model's logits, and returns
// no logits for it (as the CUDA backend); the request whose seed is kFailingSeed gets an error.
class SamplingBackend : public ForwardModel {
 public:
  explicit SamplingBackend(std::unique_ptr<ForwardModel> inner) : inner_(std::move(inner)) {}
  std::unique_ptr<SequenceState> new_sequence() const override { return inner_->new_sequence(); }
  ForwardResult forward(std::span<const SequenceChunk> chunks) override {
    ForwardResult r = inner_->forward(chunks);
    r.sampled.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      const ChunkSampling* s = chunks[i].sampling;
      if (s == nullptr) continue;
      ++sampled_;
      SampleOutcome o;
      if (s->row.seed == kFailingSeed) {
        o.error = "injected failure";
      } else {
        const std::vector<float> row(r.logits[i].begin(), r.logits[i].end());
        SamplerRow in = s->row;
        in.logits = row;
        o.result = sample_row(*s->params, in);
      }
      r.sampled[i] = std::move(o);
      r.logits[i].clear();
    }
    return r;
  }
  void dspark_prefill(SequenceState& st, const std::vector<std::vector<double>>& rows) override {
    inner_->dspark_prefill(st, rows);
  }
  DraftResult dspark_step(SequenceState& st, int64_t id, const std::vector<double>& row) override {
    return inner_->dspark_step(st, id, row);
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int64_t sampled() const { return sampled_; }

 private:
  std::unique_ptr<ForwardModel> inner_;
  int64_t sampled_ = 0;
};

std::vector<NewRequest> requests() {
  std::vector<NewRequest> out;
  auto add = [&](std::vector<int64_t> prompt, SamplingParams p) {
    NewRequest r;
    r.request_id = std::to_string(out.size());
    r.prompt_token_ids = std::move(prompt);
    r.params = std::move(p);
    out.push_back(std::move(r));
  };
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.ignore_eos = true;
  greedy.max_tokens = 10;
  add({9, 10, 11}, greedy);
  SamplingParams t = greedy;
  t.temperature = 0.8;
  t.top_p = 0.9;
  t.top_k = 40;
  t.seed = 7;
  t.logprobs = 5;
  add({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}, t);
  SamplingParams pen = t;
  pen.repetition_penalty = 1.3;
  pen.frequency_penalty = 0.4;
  pen.presence_penalty = 0.2;
  pen.seed = 11;
  pen.logprobs = 0;
  add({30, 31, 30, 31, 30}, pen);
  SamplingParams min_tok;
  min_tok.temperature = 1.0;
  min_tok.min_p = 0.05;
  min_tok.seed = 13;
  min_tok.min_tokens = 6;
  min_tok.max_tokens = 12;
  add({40, 41}, min_tok);
  SamplingParams failing = t;
  failing.seed = kFailingSeed;
  add({50, 51, 52}, failing);
  return out;
}

struct EngineRun {
  std::map<std::string, deepinfer::RequestOutput> outs;
  int64_t backend_samples = 0;
};

EngineRun run(bool sample_in_backend) {
  deepinfer::LLM llm_for_tokenizer(kTinyFixtureA, [] {
    deepinfer::EngineConfig c;
    c.cache_dir = fs::path(DI_BINARY_DIR) / "test-cache";
    return c;
  }());
  const ModelConfig cfg = load_model_config(kTinyFixtureA);
  ForwardOptions fo;
  fo.precision = Precision::kFp32;
  auto backend = std::make_unique<SamplingBackend>(load_cpu_forward_model(
      kTinyFixtureA, fo,
      CompressedTokenMap::load(kTinyFixtureA, cfg.engram_compressed_vocab_size)));
  EngineCoreConfig ec;
  ec.scheduler.max_num_seqs = 8;
  ec.scheduler.max_num_batched_tokens = 8;  // chunked prefill: sampling only after the last chunk
  ec.scheduler.max_model_len = cfg.max_position_embeddings;
  ec.cache.memory_budget_bytes = 1ull << 30;
  ec.sample_in_backend = sample_in_backend;
  const StateBytes sb = compute_state_bytes(cfg, build_layer_plan(cfg));
  EngineCore core(*backend, llm_for_tokenizer.impl().tokenizer(), cfg, sb, ec);
  for (NewRequest& r : requests())
    core.add_request(std::move(r));
  EngineRun out;
  while (core.has_unfinished()) {
    for (EngineCore::Update& u : core.step())
      out.outs[u.output.request_id] = std::move(u.output);
  }
  out.backend_samples = backend->sampled();
  return out;
}

TEST(EngineBackendSampling, SameTokensAndLogprobsAsSamplingTheLogitsHere) {
  if (!fs::exists(kTinyFixtureA / "config.json")) GTEST_SKIP() << "missing " << kTinyFixtureA;
  const EngineRun host = run(false);
  const EngineRun backend = run(true);
  EXPECT_EQ(host.backend_samples, 0);
  ASSERT_EQ(host.outs.size(), 5u);
  ASSERT_EQ(backend.outs.size(), 5u);
  int64_t generated = 0;
  for (const auto& [id, h] : host.outs) {
    const deepinfer::RequestOutput& b = backend.outs.at(id);
    if (id == "4") {
      // The host sampler succeeds on this row; the backend reports a failure for it alone.
      EXPECT_EQ(h.error, "");
      EXPECT_NE(b.error.find("injected failure"), std::string::npos) << b.error;
      EXPECT_EQ(b.outputs[0].finish_reason, "error");
      continue;
    }
    ASSERT_EQ(h.error, "") << id;
    ASSERT_EQ(b.error, "") << id;
    EXPECT_EQ(b.outputs[0].token_ids, h.outputs[0].token_ids) << "request " << id;
    EXPECT_EQ(b.outputs[0].finish_reason, h.outputs[0].finish_reason) << id;
    EXPECT_EQ(b.outputs[0].cumulative_logprob, h.outputs[0].cumulative_logprob) << id;
    ASSERT_EQ(b.outputs[0].logprobs.size(), h.outputs[0].logprobs.size()) << id;
    for (size_t k = 0; k < h.outputs[0].logprobs.size(); ++k) {
      const auto& hp = h.outputs[0].logprobs[k];
      const auto& bp = b.outputs[0].logprobs[k];
      ASSERT_EQ(bp.size(), hp.size()) << id << " position " << k;
      for (const auto& [tok, lp] : hp) {
        ASSERT_TRUE(bp.contains(tok)) << id << " position " << k << " token " << tok;
        EXPECT_EQ(bp.at(tok).logprob, lp.logprob);
        EXPECT_EQ(bp.at(tok).rank, lp.rank);
      }
    }
    generated += static_cast<int64_t>(h.outputs[0].token_ids.size());
  }
  EXPECT_EQ(host.outs.at("1").outputs[0].logprobs.size(), 10u);
  EXPECT_GE(host.outs.at("3").outputs[0].token_ids.size(), 6u);  // min_tokens
  // Every token came from the backend (plus the failing request's one attempt).
  EXPECT_EQ(backend.backend_samples, generated + 1);
}

}  // namespace
}  // namespace di
