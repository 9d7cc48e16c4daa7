// Engine acceptance tests on the CPU backend (issue #5): the fixture model's reference greedy
// ids, batch invariance across scheduling (alone / batched with chunked prefill / reversed /
// preempted), seeds, stop conditions and aborts.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/llm.h"
#include "engine/engine_core.h"
#include "engine/llm_impl.h"
#include "loader/safetensors.h"
#include "tests_support/error_of.h"
#include "tests_support/fixture_paths.h"

namespace di {
namespace {

namespace fs = std::filesystem;
using deepinfer::EngineConfig;
using deepinfer::LLM;
using deepinfer::Prompt;
using deepinfer::RequestOutput;
using deepinfer::SamplingParams;

using testing_support::kTinyFixtureA;

#define DI_REQUIRE_FIXTURE()                                                                   \
  if (!fs::exists(kTinyFixtureA / "config.json")) GTEST_SKIP() << "missing " << kTinyFixtureA; \
  do {                                                                                         \
  } while (0)

EngineConfig fixture_config() {
  EngineConfig c;
  c.cache_dir = fs::path(DI_BINARY_DIR) / "test-cache";
  return c;
}

// Rows of an I64 [B, L] tensor.
std::vector<std::vector<int64_t>> rows_of(const SafetensorsFile& f, const std::string& key) {
  const ConstTensorView v = f.view(key);
  const auto data = v.as<int64_t>();
  const int64_t rows = v.shape[0], cols = v.shape[1];
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < rows; ++r)
    out.emplace_back(data.begin() + r * cols, data.begin() + (r + 1) * cols);
  return out;
}

// Greedy decoding of exactly `tokens` tokens (EOS ignored).
SamplingParams greedy_to_length(int64_t tokens) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = tokens;
  return sp;
}

TEST(Engine, GreedyEqualsTheReferenceOnTheFixture) {
  DI_REQUIRE_FIXTURE();
  const SafetensorsFile cases((kTinyFixtureA / "cases.safetensors").string());
  const auto prompts = rows_of(cases, "greedy.prompt_ids");
  for (const std::string behaviour : {"intended", "shipped"}) {
    const auto expected = rows_of(cases, "greedy.fp64.ids_" + behaviour);
    EngineConfig cfg = fixture_config();
    cfg.precision = "fp64";
    cfg.index_key_quirk_shipped = behaviour == "shipped";
    LLM llm(kTinyFixtureA, cfg);
    SamplingParams sp;
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = static_cast<int64_t>(expected[0].size());
    std::vector<Prompt> ps(prompts.begin(), prompts.end());
    const std::vector<RequestOutput> outs = llm.generate(ps, sp);
    ASSERT_EQ(outs.size(), prompts.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      ASSERT_EQ(outs[i].error, "");
      EXPECT_EQ(outs[i].outputs[0].token_ids, expected[i]) << behaviour << " row " << i;
      EXPECT_EQ(outs[i].outputs[0].finish_reason, "length");
    }
  }
}

// "auto" (the default) resolves by backend: fp32 on the CPU; an explicit precision stays; an
// unknown one is an error naming the option.
TEST(Engine, PrecisionAutoResolvesByBackend) {
  DI_REQUIRE_FIXTURE();
  EngineConfig cfg = fixture_config();
  EXPECT_EQ(cfg.precision, "auto");
  EXPECT_EQ(LLM(kTinyFixtureA, cfg).config().precision, "fp32");
  cfg.precision = "bf16";
  EXPECT_EQ(LLM(kTinyFixtureA, cfg).config().precision, "bf16");
  cfg.precision = "fp16";
  try {
    LLM bad(kTinyFixtureA, cfg);
    FAIL() << "fp16 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--precision fp16"), std::string::npos) << e.what();
  }
}

// The attention kernel is checked whatever the backend: an unknown one names the option.
TEST(Engine, UnknownAttentionKernelIsAnError) {
  DI_REQUIRE_FIXTURE();
  EngineConfig cfg = fixture_config();
  EXPECT_EQ(cfg.attention_kernel, "auto");
  cfg.attention_kernel = "flash";
  const std::string err = di::test::error_of([&] { LLM bad(kTinyFixtureA, cfg); });
  EXPECT_NE(err.find("--attention-kernel flash"), std::string::npos) << err;
}

struct Workload {
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
};

// 24 requests: prompt lengths 1..90, greedy and seeded sampling with assorted processors,
// logprobs on some.
Workload make_workload(int64_t vocab) {
  std::mt19937_64 rng(1234);
  Workload w;
  for (int i = 0; i < 24; ++i) {
    const int64_t len = 1 + static_cast<int64_t>(rng() % 90);
    std::vector<int64_t> ids(static_cast<size_t>(len));
    for (auto& id : ids)
      id = 3 + static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab - 3));
    w.prompts.emplace_back(ids);
    SamplingParams sp;
    sp.max_tokens = 4 + static_cast<int64_t>(rng() % 14);
    switch (i % 4) {
      case 0:
        sp.temperature = 0;
        break;
      case 1:
        sp.temperature = 0.8;
        sp.top_p = 0.9;
        break;
      case 2:
        sp.temperature = 1.2;
        sp.top_k = 20;
        sp.min_p = 0.01;
        break;
      default:
        sp.temperature = 1.0;
        sp.repetition_penalty = 1.1;
        sp.presence_penalty = 0.3;
        break;
    }
    if (sp.temperature > 0) sp.seed = 1000 + static_cast<uint64_t>(i);
    if (i % 3 == 0) sp.logprobs = 3;
    w.params.push_back(sp);
  }
  return w;
}

void expect_same_outputs(const std::vector<RequestOutput>& a, const std::vector<RequestOutput>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].error, "") << what << " request " << i;
    ASSERT_EQ(b[i].error, "") << what << " request " << i;
    const auto& x = a[i].outputs[0];
    const auto& y = b[i].outputs[0];
    EXPECT_EQ(x.token_ids, y.token_ids) << what << " request " << i;
    EXPECT_EQ(x.finish_reason, y.finish_reason) << what << " request " << i;
    ASSERT_EQ(x.logprobs.size(), y.logprobs.size()) << what << " request " << i;
    for (size_t k = 0; k < x.logprobs.size(); ++k) {
      ASSERT_EQ(x.logprobs[k].size(), y.logprobs[k].size());
      for (const auto& [id, lp] : x.logprobs[k]) {
        ASSERT_TRUE(y.logprobs[k].count(id)) << what << " request " << i << " pos " << k;
        EXPECT_EQ(lp.logprob, y.logprobs[k].at(id).logprob) << what << " request " << i;  // bitwise
        EXPECT_EQ(lp.rank, y.logprobs[k].at(id).rank);
      }
    }
    EXPECT_EQ(x.cumulative_logprob, y.cumulative_logprob) << what << " request " << i;
  }
}

TEST(Engine, BatchInvariantAcrossSchedulingOrderAndPreemption) {
  DI_REQUIRE_FIXTURE();
  const EngineConfig base = fixture_config();
  const Workload w = [&] {
    LLM probe(kTinyFixtureA, base);
    return make_workload(probe.impl().model_config().vocab_size);
  }();

  // (a) one at a time
  std::vector<RequestOutput> alone;
  {
    LLM llm(kTinyFixtureA, base);
    for (size_t i = 0; i < w.prompts.size(); ++i) {
      alone.push_back(llm.generate({w.prompts[i]}, {w.params[i]}).at(0));
    }
  }
  // (b) together, forcing chunked prefill and small batches
  EngineConfig tight = base;
  tight.max_num_seqs = 8;
  tight.max_num_batched_tokens = 64;
  {
    LLM llm(kTinyFixtureA, tight);
    const auto together = llm.generate(w.prompts, w.params);
    expect_same_outputs(alone, together, "batched");
    EXPECT_GT(llm.impl().core().totals().steps, 24);
  }
  // (c) reversed order
  {
    LLM llm(kTinyFixtureA, tight);
    std::vector<Prompt> ps(w.prompts.rbegin(), w.prompts.rend());
    std::vector<SamplingParams> sps(w.params.rbegin(), w.params.rend());
    auto rev = llm.generate(ps, sps);
    std::reverse(rev.begin(), rev.end());
    expect_same_outputs(alone, rev, "reversed");
  }
  // (d) a state budget for a few sequences only, in small pages so that decoding sequences
  // keep needing new pages: requests are preempted and recomputed
  {
    EngineConfig paged = tight;
    paged.kv_cache_page_bytes = 512;
    LLM sizing(kTinyFixtureA, paged);
    const KvCacheManager& cache = sizing.impl().core().cache();
    EngineConfig small = paged;
    small.kv_cache_memory_bytes =
        static_cast<uint64_t>(3 * cache.pages_for_tokens(110) * cache.page_bytes());
    LLM llm(kTinyFixtureA, small);
    const auto preempted = llm.generate(w.prompts, w.params);
    expect_same_outputs(alone, preempted, "preempted");
    EXPECT_GT(llm.impl().core().totals().preemptions, 0);
    EXPECT_EQ(llm.impl().core().cache().used_pages(), 0);
  }
}

TEST(Engine, SeedsReproduceAndDiffer) {
  DI_REQUIRE_FIXTURE();
  SamplingParams sp;
  sp.temperature = 1.0;
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  const std::vector<Prompt> prompt{std::vector<int64_t>{5, 6, 7, 8}};
  auto run = [&](uint64_t seed) {
    LLM llm(kTinyFixtureA, fixture_config());
    SamplingParams p = sp;
    p.seed = seed;
    return llm.generate(prompt, p).at(0).outputs[0].token_ids;
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Without a seed: derived from the engine seed and the request index (reproducible per run).
  LLM x(kTinyFixtureA, fixture_config()), y(kTinyFixtureA, fixture_config());
  sp.seed.reset();
  EXPECT_EQ(x.generate({prompt[0], prompt[0]}, sp)[1].outputs[0].token_ids,
            y.generate({prompt[0], prompt[0]}, sp)[1].outputs[0].token_ids);
  const auto two = x.generate({prompt[0], prompt[0]}, sp);
  EXPECT_NE(two[0].outputs[0].token_ids, two[1].outputs[0].token_ids);
}

TEST(Engine, StopConditionsAndPerRequestErrors) {
  DI_REQUIRE_FIXTURE();
  LLM llm(kTinyFixtureA, fixture_config());
  const std::vector<int64_t> prompt{9, 10, 11};
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.ignore_eos = true;
  greedy.max_tokens = 12;
  const auto ref = llm.generate({prompt}, greedy).at(0).outputs[0].token_ids;
  ASSERT_EQ(ref.size(), 12u);

  SamplingParams stop_id = greedy;
  stop_id.stop_token_ids = {ref[4]};
  SamplingParams min_tok = stop_id;
  min_tok.min_tokens = 6;  // the stop id cannot be sampled before 6 tokens
  SamplingParams bad = greedy;
  bad.top_p = 0;
  SamplingParams too_long = greedy;
  too_long.max_tokens = 1 << 30;
  const auto outs = llm.generate({prompt, prompt, prompt, prompt, std::vector<int64_t>{99999}},
                                 {stop_id, min_tok, bad, too_long, greedy});
  const auto first_stop =
      static_cast<size_t>(std::find(ref.begin(), ref.end(), ref[4]) - ref.begin());
  EXPECT_EQ(outs[0].outputs[0].finish_reason, "stop");
  EXPECT_EQ(outs[0].outputs[0].stop_reason, std::to_string(ref[4]));
  EXPECT_EQ(outs[0].outputs[0].token_ids,
            std::vector<int64_t>(ref.begin(), ref.begin() + static_cast<long>(first_stop) + 1));
  EXPECT_GE(outs[1].outputs[0].token_ids.size(), 6u);
  EXPECT_NE(outs[2].error.find("top_p"), std::string::npos) << outs[2].error;
  EXPECT_NE(outs[3].error.find("max"), std::string::npos) << outs[3].error;
  // Rejected by the scheduler, which names the request by its request id.
  EXPECT_EQ(outs[3].error.rfind("request " + outs[3].request_id + ": prompt of 3 tokens", 0), 0u)
      << outs[3].error;
  EXPECT_NE(outs[4].error.find("outside the vocabulary"), std::string::npos) << outs[4].error;
}

TEST(Engine, AbortFreesMemory) {
  DI_REQUIRE_FIXTURE();
  LLM llm(kTinyFixtureA, fixture_config());
  EngineCore& core = llm.impl().core();
  const SamplingParams sp = greedy_to_length(1000);
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    NewRequest r =
        llm.impl().text_request(Prompt(std::vector<int64_t>{5, 6, 7}), sp, "r" + std::to_string(i));
    ids.push_back(core.add_request(std::move(r)));
  }
  for (int s = 0; s < 3; ++s)
    core.step();
  const int64_t used = core.cache().used_pages();
  EXPECT_GT(used, 0);
  core.abort(ids[1]);
  auto updates = core.step();
  bool saw_abort = false;
  for (const auto& u : updates) {
    if (u.id == ids[1]) {
      saw_abort = true;
      EXPECT_EQ(u.output.outputs[0].finish_reason, "abort");
      EXPECT_TRUE(u.output.finished);
    }
  }
  EXPECT_TRUE(saw_abort);
  EXPECT_LT(core.cache().used_pages(), used);
  core.abort(ids[0]);
  core.abort(ids[2]);
  core.step();
  EXPECT_FALSE(core.has_unfinished());
  EXPECT_EQ(core.cache().used_pages(), 0);
  EXPECT_EQ(core.cache().total_exact_bytes(), 0u);
}

TEST(Engine, OnlyStreamingRequestsReportEveryToken) {
  DI_REQUIRE_FIXTURE();
  LLM llm(kTinyFixtureA, fixture_config());
  EngineCore& core = llm.impl().core();
  const SamplingParams sp = greedy_to_length(6);
  const Prompt prompt(std::vector<int64_t>{5, 6, 7});
  NewRequest quiet = llm.impl().text_request(prompt, sp, "quiet");
  NewRequest streamed = llm.impl().text_request(prompt, sp, "streamed");
  streamed.stream = true;
  const int64_t q = core.add_request(std::move(quiet));
  const int64_t s = core.add_request(std::move(streamed));
  std::map<int64_t, std::vector<RequestOutput>> seen;
  while (core.has_unfinished()) {
    for (EngineCore::Update& u : core.step())
      seen[u.id].push_back(std::move(u.output));
  }
  ASSERT_EQ(seen[q].size(), 1u);  // the final output only
  EXPECT_TRUE(seen[q][0].finished);
  ASSERT_EQ(seen[s].size(), 6u);  // one cumulative output per token
  for (size_t i = 0; i < seen[s].size(); ++i) {
    EXPECT_EQ(seen[s][i].outputs[0].token_ids.size(), i + 1);
    EXPECT_EQ(seen[s][i].finished, i == 5);
  }
  EXPECT_EQ(seen[s].back().outputs[0].token_ids, seen[q][0].outputs[0].token_ids);
  EXPECT_EQ(seen[s].back().outputs[0].text, seen[q][0].outputs[0].text);
}

TEST(Engine, StreamCallbackSeesCumulativeOutputsAndTheSameResult) {
  DI_REQUIRE_FIXTURE();
  LLM llm(kTinyFixtureA, fixture_config());
  const SamplingParams sp = greedy_to_length(12);
  // A chat request (its output goes through the chat parser) with a prompt inside the fixture's
  // small vocabulary.
  auto chat_request = [&](const std::string& id) {
    const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
    NewRequest r = llm.impl().chat_request(messages, sp, {}, id);
    r.prompt_token_ids = {5, 6, 7, 8};
    return r;
  };
  std::vector<NewRequest> one;
  one.push_back(chat_request("plain"));
  const RequestOutput plain = llm.impl().run(std::move(one), nullptr).at(0);
  std::vector<RequestOutput> stream;
  one.clear();
  one.push_back(chat_request("streamed"));
  const RequestOutput streamed =
      llm.impl().run(std::move(one), [&](const RequestOutput& o) { stream.push_back(o); }).at(0);
  ASSERT_TRUE(plain.error.empty()) << plain.error;
  ASSERT_EQ(stream.size(), 12u);
  for (size_t i = 0; i < stream.size(); ++i) {
    const deepinfer::CompletionOutput& c = stream[i].outputs[0];
    EXPECT_EQ(stream[i].finished, i + 1 == stream.size());
    EXPECT_EQ(c.token_ids.size(), i + 1);
    EXPECT_EQ(streamed.outputs[0].text.rfind(c.text, 0), 0u) << i;  // a prefix of the final text
  }
  // Built once at the end or refreshed after every token: the same final output.
  const deepinfer::CompletionOutput &a = plain.outputs[0], &b = streamed.outputs[0];
  EXPECT_EQ(b.token_ids, a.token_ids);
  EXPECT_FALSE(b.text.empty());
  EXPECT_EQ(b.text, a.text);
  EXPECT_TRUE(b.reasoning_content.has_value() || b.content.has_value());
  EXPECT_EQ(b.reasoning_content, a.reasoning_content);
  EXPECT_EQ(b.content, a.content);
  EXPECT_EQ(b.tool_calls.size(), a.tool_calls.size());
  EXPECT_EQ(b.finish_reason, a.finish_reason);
}

TEST(Engine, PromptLogprobsCoverThePrompt) {
  DI_REQUIRE_FIXTURE();
  LLM llm(kTinyFixtureA, fixture_config());
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 2;
  sp.prompt_logprobs = 2;
  const std::vector<int64_t> prompt{5, 6, 7, 8, 9, 10};
  const RequestOutput out = llm.generate({prompt}, sp).at(0);
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size());
  EXPECT_FALSE(out.prompt_logprobs[0].has_value());
  for (size_t i = 1; i < prompt.size(); ++i) {
    ASSERT_TRUE(out.prompt_logprobs[i].has_value());
    EXPECT_TRUE(out.prompt_logprobs[i]->count(prompt[i])) << i;  // the actual prompt token
    EXPECT_LE(out.prompt_logprobs[i]->size(), 3u);
  }
  // Chunked prefill gives the same prompt logprobs.
  EngineConfig small = fixture_config();
  small.max_num_batched_tokens = 2;
  LLM chunked(kTinyFixtureA, small);
  const RequestOutput out2 = chunked.generate({prompt}, sp).at(0);
  for (size_t i = 1; i < prompt.size(); ++i) {
    for (const auto& [id, lp] : *out.prompt_logprobs[i])
      EXPECT_EQ(lp.logprob, out2.prompt_logprobs[i]->at(id).logprob);
  }
}

}  // namespace
}  // namespace di
