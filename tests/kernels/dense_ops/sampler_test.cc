// The GPU sampler against the CPU sampler (sampling/sampler.h) at vocab 129,280: identical token
// ids on 2,400+ rows across greedy / temperature / top_k / top_p / min_p / penalties / min_tokens
// suppression / logprobs / exact ties, many seeds and positions. No near-tie exception is allowed:
// every row must match. Logprobs: top ids and ranks identical, values within 1e-9.

#include "kernels/cuda/ops/sampler.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/dense_ops/dense_ops_test_util.h"
#include "sampling/sampler.h"

namespace di {
namespace {

using namespace dense_test;  // NOLINT
using deepinfer::SamplingParams;

constexpr int64_t kSamplerVocab = 129280;

enum class Shape { kPeaked, kFlat, kTies };

struct Case {
  std::string name;
  SamplingParams params;
  Shape shape = Shape::kPeaked;
  int64_t prompt_len = 0;
  int64_t output_len = 0;
  bool suppress = false;
};

std::vector<float> make_logits(Shape shape, uint64_t seed) {
  std::vector<float> v =
      random_normal(static_cast<size_t>(kSamplerVocab), seed, shape == Shape::kFlat ? 1.0f : 3.0f);
  if (shape == Shape::kTies) {
    for (auto& x : v)
      x = std::round(x * 2.0f) / 2.0f;  // a few dozen distinct values: many exact ties
  }
  return v;
}

SamplingParams with(double t, double top_p = 1.0, int64_t top_k = 0, double min_p = 0.0) {
  SamplingParams p;
  p.temperature = t;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  return p;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"greedy", with(0.0)});
  c.push_back({"greedy_ties", with(0.0), Shape::kTies});
  c.push_back({"t1", with(1.0)});
  c.push_back({"t07_flat", with(0.7), Shape::kFlat});
  c.push_back({"top_k50", with(1.0, 1.0, 50)});
  c.push_back({"top_k1_ties", with(0.9, 1.0, 1), Shape::kTies});
  c.push_back({"top_p09", with(1.0, 0.9)});
  c.push_back({"top_p05_flat", with(0.8, 0.5), Shape::kFlat});
  c.push_back({"top_p_ties", with(1.0, 0.7), Shape::kTies});
  c.push_back({"min_p005", with(1.0, 1.0, 0, 0.05)});
  c.push_back({"all_filters", with(0.8, 0.95, 40, 0.02)});
  c.push_back({"top_k_ties", with(1.3, 1.0, 300), Shape::kTies});
  Case pen{"penalties", with(0.9, 0.9), Shape::kPeaked, 3000, 700};
  pen.params.repetition_penalty = 1.3;
  pen.params.frequency_penalty = 0.4;
  pen.params.presence_penalty = 0.25;
  c.push_back(pen);
  Case pen_greedy{"penalties_greedy", with(0.0), Shape::kPeaked, 2000, 500};
  pen_greedy.params.repetition_penalty = 1.1;
  pen_greedy.params.frequency_penalty = -0.5;
  c.push_back(pen_greedy);
  Case sup{"min_tokens", with(1.0, 0.8), Shape::kPeaked, 0, 3, true};
  sup.params.min_tokens = 10;
  sup.params.stop_token_ids = {5, 17, 123456};
  c.push_back(sup);
  Case lp{"logprobs", with(1.0, 0.9)};
  lp.params.logprobs = 5;
  c.push_back(lp);
  Case lp20{"logprobs20_greedy_ties", with(0.0), Shape::kTies};
  lp20.params.logprobs = 20;
  c.push_back(lp20);
  return c;
}

// One sample_rows call on uploaded rows: a workspace filled with 0xFF (the sampler must not rely
// on a clean one) and poisoned outputs, launched by the constructor.
struct SamplerRun {
  DeviceBuffer ld, rd, idd, ws, tok, st, top_ids, top_lp, tok_lp, tok_rank;
  SamplerRun(const std::vector<float>& logits, const std::vector<SamplerRowParams>& rps,
             const std::vector<int64_t>& ids, int64_t rows, int64_t vocab, cudaStream_t s)
      : ld(upload(logits, s, "logits")),
        rd(upload(rps, s, "row params")),
        idd(upload(ids, s, "ids")),
        ws(sampler_workspace_bytes(rows, vocab), "sampler workspace"),
        tok(poisoned<int64_t>(static_cast<size_t>(rows), s)),
        st(poisoned<int32_t>(static_cast<size_t>(rows), s)),
        top_ids(poisoned<int64_t>(static_cast<size_t>(rows * kSamplerMaxLogprobs), s)),
        top_lp(poisoned<double>(static_cast<size_t>(rows * kSamplerMaxLogprobs), s)),
        tok_lp(poisoned<double>(static_cast<size_t>(rows), s)),
        tok_rank(poisoned<int64_t>(static_cast<size_t>(rows), s)) {
    ws.fill_async(0xFF, s);
    SamplerParams p;
    p.logits = ld.as<float>();
    p.row_params = rd.as<SamplerRowParams>();
    p.ids = idd.as<int64_t>();
    p.rows = rows;
    p.vocab = vocab;
    p.workspace = ws.data();
    p.tokens = tok.as<int64_t>();
    p.status = st.as<int32_t>();
    p.top_ids = top_ids.as<int64_t>();
    p.top_logprobs = top_lp.as<double>();
    p.token_logprob = tok_lp.as<double>();
    p.token_rank = tok_rank.as<int64_t>();
    sample_rows(p, s);
  }
};

class SamplerParityTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { DI_REQUIRE_GPU(); }
};

TEST_P(SamplerParityTest, TokensMatchCpu) {
  const Case& c = GetParam();
  const int64_t rows = 150;
  Stream stream;
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  std::vector<float> logits(static_cast<size_t>(rows * kSamplerVocab));
  std::vector<SamplerRowParams> rps;
  std::vector<int64_t> ids;
  std::vector<int64_t> expected(static_cast<size_t>(rows));
  std::vector<std::optional<RowLogprobs>> expected_lp(static_cast<size_t>(rows));
  const std::vector<int64_t> eos = {1, 2};
  SamplerScratch scratch;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = make_logits(c.shape, rng());
    std::copy(row.begin(), row.end(), logits.begin() + r * kSamplerVocab);
    if (c.suppress) {  // make the suppressed ids the most likely ones
      for (const int64_t id : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{17}, int64_t{123456}})
        logits[static_cast<size_t>(r * kSamplerVocab + id)] = 30.0f;
    }
    std::vector<int64_t> prompt(static_cast<size_t>(c.prompt_len));
    std::vector<int64_t> output(static_cast<size_t>(c.output_len));
    for (auto& id : prompt)  // small id range: many repeats, and ids of large logits
      id = static_cast<int64_t>(rng() % 4000);
    for (auto& id : output)
      id = static_cast<int64_t>(rng() % 2000);
    const uint64_t seed = rng();
    const auto position = static_cast<int64_t>(rng() % (uint64_t{1} << 40));
    SamplerRow cpu_row;
    cpu_row.logits = std::span<const float>(logits.data() + r * kSamplerVocab, kSamplerVocab);
    cpu_row.seed = seed;
    cpu_row.position = position;
    cpu_row.prompt_ids = prompt;
    cpu_row.output_ids = output;
    cpu_row.eos_ids = eos;
    cpu_row.suppress_stop_tokens = c.suppress && min_tokens_pending(c.params, output.size());
    const SampleResult res = sample_row(c.params, cpu_row, scratch);
    expected[static_cast<size_t>(r)] = res.token_id;
    expected_lp[static_cast<size_t>(r)] = res.logprobs;
    rps.push_back(make_sampler_row(c.params, seed, position, prompt, output, eos,
                                   cpu_row.suppress_stop_tokens, kSamplerVocab, ids));
  }

  SamplerRun run(logits, rps, ids, rows, kSamplerVocab, stream.get());
  const DeviceBuffer &tok = run.tok, &st = run.st, &top_ids = run.top_ids, &top_lp = run.top_lp;
  const DeviceBuffer &tok_lp = run.tok_lp, &tok_rank = run.tok_rank;
  const auto got = download<int64_t>(tok, static_cast<size_t>(rows), stream.get());
  const auto status = download<int32_t>(st, static_cast<size_t>(rows), stream.get());
  EXPECT_NO_THROW(check_sampler_status(status));
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (got[static_cast<size_t>(r)] != expected[static_cast<size_t>(r)]) {
      ++mismatches;
      ADD_FAILURE() << c.name << " row " << r << ": GPU token " << got[static_cast<size_t>(r)]
                    << ", CPU token " << expected[static_cast<size_t>(r)];
    }
  }
  EXPECT_EQ(mismatches, 0);
  if (c.params.logprobs) {
    const auto gi =
        download<int64_t>(top_ids, static_cast<size_t>(rows * kSamplerMaxLogprobs), stream.get());
    const auto gl =
        download<double>(top_lp, static_cast<size_t>(rows * kSamplerMaxLogprobs), stream.get());
    const auto tl = download<double>(tok_lp, static_cast<size_t>(rows), stream.get());
    const auto tr = download<int64_t>(tok_rank, static_cast<size_t>(rows), stream.get());
    for (int64_t r = 0; r < rows; ++r) {
      const RowLogprobs& e = *expected_lp[static_cast<size_t>(r)];
      ASSERT_EQ(tr[static_cast<size_t>(r)], e.token.rank) << "row " << r;
      ASSERT_NEAR(tl[static_cast<size_t>(r)], e.token.logprob, 1e-9) << "row " << r;
      for (size_t k = 0; k < e.top.size(); ++k) {
        const size_t at = static_cast<size_t>(r * kSamplerMaxLogprobs) + k;
        ASSERT_EQ(gi[at], e.top[k].token_id) << "row " << r << " rank " << k + 1;
        ASSERT_NEAR(gl[at], e.top[k].logprob, 1e-9) << "row " << r << " rank " << k + 1;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SamplerParityTest, ::testing::ValuesIn(cases()),
                         [](const auto& tp) { return tp.param.name; });

// logits_rows: sampled rows read arbitrary logits rows (the forward samples the last row of each
// chunk), and SamplerOutputBlock packs the outputs into one block read back in one copy.
TEST(SamplerRows, LogitsRowIndirectionAndOutputBlock) {
  DI_REQUIRE_GPU();
  Stream stream;
  constexpr int64_t kLogitsRows = 3;
  std::vector<float> logits;
  for (int64_t r = 0; r < kLogitsRows; ++r) {
    const std::vector<float> v = make_logits(Shape::kFlat, 50 + static_cast<uint64_t>(r));
    logits.insert(logits.end(), v.begin(), v.end());
  }
  const std::vector<int64_t> which = {2, 0, 2, 1};
  SamplingParams sp = with(0.9, 0.95);
  sp.logprobs = 4;
  std::vector<int64_t> ids;
  std::vector<SamplerRowParams> rps;
  std::vector<SampleResult> expected;
  for (size_t r = 0; r < which.size(); ++r) {
    SamplerRow row;
    row.logits = std::span<const float>(logits.data() + which[r] * kSamplerVocab, kSamplerVocab);
    row.seed = 9 + r;
    row.position = 100;
    expected.push_back(sample_row(sp, row));
    rps.push_back(
        make_sampler_row(sp, row.seed, row.position, {}, {}, {}, false, kSamplerVocab, ids));
  }
  ids.push_back(0);  // keep the ids buffer non-empty
  const DeviceBuffer ld = upload(logits, stream.get());
  const DeviceBuffer rd = upload(rps, stream.get());
  const DeviceBuffer idd = upload(ids, stream.get());
  const DeviceBuffer wd = upload(which, stream.get());
  const auto rows = static_cast<int64_t>(which.size());
  DeviceBuffer ws(sampler_workspace_bytes(rows, kSamplerVocab), "ws");
  const SamplerOutputBlock block(rows);
  DeviceBuffer out(block.bytes(), "outputs");
  out.fill_async(0xFF, stream.get());
  SamplerParams p;
  p.logits = ld.as<float>();
  p.logits_rows = wd.as<int64_t>();
  p.row_params = rd.as<SamplerRowParams>();
  p.ids = idd.as<int64_t>();
  p.rows = rows;
  p.vocab = kSamplerVocab;
  p.workspace = ws.data();
  block.bind(p, out.data());
  sample_rows(p, stream.get());
  const auto host = download<std::byte>(out, block.bytes(), stream.get());
  for (int64_t r = 0; r < rows; ++r) {
    const SampleOutcome o = block.row(host, r, rps[static_cast<size_t>(r)].logprobs);
    const SampleResult& e = expected[static_cast<size_t>(r)];
    ASSERT_EQ(o.error, "") << r;
    EXPECT_EQ(o.result.token_id, e.token_id) << r;
    ASSERT_TRUE(o.result.logprobs.has_value()) << r;
    EXPECT_EQ(o.result.logprobs->token.rank, e.logprobs->token.rank) << r;
    EXPECT_NEAR(o.result.logprobs->token.logprob, e.logprobs->token.logprob, 1e-9) << r;
    ASSERT_EQ(o.result.logprobs->top.size(), e.logprobs->top.size()) << r;
    for (size_t k = 0; k < e.logprobs->top.size(); ++k) {
      EXPECT_EQ(o.result.logprobs->top[k].token_id, e.logprobs->top[k].token_id) << r;
      EXPECT_EQ(o.result.logprobs->top[k].rank, e.logprobs->top[k].rank) << r;
      EXPECT_NEAR(o.result.logprobs->top[k].logprob, e.logprobs->top[k].logprob, 1e-9) << r;
    }
  }
}

// Host side, no GPU: the id lists a row uploads are those the CPU sampler reads (and checks):
// the prompt only for a repetition penalty, the output for any penalty, the stop ids only while
// min_tokens is pending.
TEST(SamplerRowsHost, IdListsOnlyForThePenaltiesThatReadThem) {
  const std::vector<int64_t> prompt = {5, 6, 7}, output = {8, 9}, eos = {1};
  auto ranges = [&](const SamplingParams& sp, bool suppress) {
    std::vector<int64_t> ids;
    const SamplerRowParams r =
        make_sampler_row(sp, 1, 10, prompt, output, eos, suppress, kSamplerVocab, ids);
    return std::vector<int64_t>{r.prompt_end - r.prompt_begin, r.output_end - r.output_begin,
                                r.suppress_end - r.suppress_begin,
                                static_cast<int64_t>(ids.size())};
  };
  SamplingParams plain = with(1.0);
  plain.stop_token_ids = {2, 3};
  EXPECT_EQ(ranges(plain, false), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(ranges(plain, true), (std::vector<int64_t>{0, 0, 3, 3}));  // EOS + two stop ids
  SamplingParams rep = plain;
  rep.repetition_penalty = 1.1;
  EXPECT_EQ(ranges(rep, false), (std::vector<int64_t>{3, 2, 0, 5}));
  SamplingParams freq = plain;
  freq.frequency_penalty = 0.5;
  EXPECT_EQ(ranges(freq, false), (std::vector<int64_t>{0, 2, 0, 2}));
  SamplingParams presence = plain;
  presence.presence_penalty = -0.5;
  EXPECT_EQ(ranges(presence, true), (std::vector<int64_t>{0, 2, 3, 5}));
}

// Host side, no GPU: SamplerOutputBlock's packing (bind's pointers into one block) and the
// reading of a row back as the CPU sampler's result, or its status as the CPU's error text.
TEST(SamplerRowsHost, OutputBlockPacksAndReadsRows) {
  constexpr int64_t kRows = 3;
  const SamplerOutputBlock block(kRows);
  std::vector<std::byte> mem(block.bytes() + 16);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(mem.data()) + 15) / 16 *
                                            16);  // bind wants 16-byte alignment
  SamplerParams p;
  block.bind(p, base);
  for (const void* q :
       {static_cast<const void*>(p.tokens), static_cast<const void*>(p.status),
        static_cast<const void*>(p.top_ids), static_cast<const void*>(p.top_logprobs),
        static_cast<const void*>(p.token_logprob), static_cast<const void*>(p.token_rank)}) {
    ASSERT_GE(static_cast<const std::byte*>(q), base);
    ASSERT_LT(static_cast<const std::byte*>(q), base + block.bytes());
  }
  for (int64_t r = 0; r < kRows; ++r) {
    p.tokens[r] = 100 + r;
    p.status[r] = 0;
    p.token_logprob[r] = -0.5 * static_cast<double>(r);
    p.token_rank[r] = r + 1;
    for (int k = 0; k < kSamplerMaxLogprobs; ++k) {
      p.top_ids[r * kSamplerMaxLogprobs + k] = 1000 * r + k;
      p.top_logprobs[r * kSamplerMaxLogprobs + k] = -static_cast<double>(k);
    }
  }
  p.status[2] = static_cast<int32_t>(SamplerStatus::kNaN);
  const std::span<const std::byte> host(base, block.bytes());
  const SampleOutcome plain = block.row(host, 0, -1);
  EXPECT_EQ(plain.error, "");
  EXPECT_EQ(plain.result.token_id, 100);
  EXPECT_FALSE(plain.result.logprobs.has_value());
  const SampleOutcome lp = block.row(host, 1, 3);
  ASSERT_TRUE(lp.result.logprobs.has_value());
  EXPECT_EQ(lp.result.token_id, 101);
  EXPECT_EQ(lp.result.logprobs->token.token_id, 101);
  EXPECT_EQ(lp.result.logprobs->token.logprob, -0.5);
  EXPECT_EQ(lp.result.logprobs->token.rank, 2);
  ASSERT_EQ(lp.result.logprobs->top.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(lp.result.logprobs->top[static_cast<size_t>(k)].token_id, 1000 + k);
    EXPECT_EQ(lp.result.logprobs->top[static_cast<size_t>(k)].logprob, -static_cast<double>(k));
    EXPECT_EQ(lp.result.logprobs->top[static_cast<size_t>(k)].rank, k + 1);
  }
  const SampleOutcome bad = block.row(host, 2, 5);
  EXPECT_EQ(bad.error, sampler_status_message(static_cast<int32_t>(SamplerStatus::kNaN)));
  EXPECT_NE(bad.error.find("NaN"), std::string::npos);
  EXPECT_THROW(block.row(host, kRows, -1), Error);       // no such row
  EXPECT_THROW(block.row(host.first(8), 0, -1), Error);  // a short copy
  EXPECT_NE(sampler_status_message(99).find("99"), std::string::npos);
}

TEST(SamplerErrors, NanRowGivesStatus) {
  DI_REQUIRE_GPU();
  Stream stream;
  std::vector<float> logits = make_logits(Shape::kFlat, 3);
  logits[777] = std::nanf("");
  std::vector<int64_t> ids;
  const std::vector<SamplerRowParams> rps = {
      make_sampler_row(with(1.0), 1, 0, {}, {}, {}, false, kSamplerVocab, ids)};
  ids.push_back(0);  // keep the ids buffer non-empty
  const DeviceBuffer ld = upload(logits, stream.get());
  const DeviceBuffer rd = upload(rps, stream.get());
  const DeviceBuffer idd = upload(ids, stream.get());
  DeviceBuffer ws(sampler_workspace_bytes(1, kSamplerVocab), "ws");
  DeviceBuffer tok = poisoned<int64_t>(1, stream.get());
  DeviceBuffer st = poisoned<int32_t>(1, stream.get());
  SamplerParams p;
  p.logits = ld.as<float>();
  p.row_params = rd.as<SamplerRowParams>();
  p.ids = idd.as<int64_t>();
  p.rows = 1;
  p.vocab = kSamplerVocab;
  p.workspace = ws.data();
  p.tokens = tok.as<int64_t>();
  p.status = st.as<int32_t>();
  sample_rows(p, stream.get());
  const auto status = download<int32_t>(st, 1, stream.get());
  EXPECT_EQ(status[0], static_cast<int32_t>(SamplerStatus::kNaN));
  EXPECT_EQ(download<int64_t>(tok, 1, stream.get())[0], -1);
  EXPECT_THROW(check_sampler_status(status), std::exception);
}

// Greedy rows without lists or logprobs take the sliced argmax (sampler_greedy_kernel): its
// edge cases against the sequential argmax of the CPU sampler, in one launch with rows that take
// the full path. Ties across slices (lowest id), -0.0 == +0.0, +inf, a NaN, all -inf, a tiny
// vocabulary with empty slices.
TEST(SamplerGreedy, SlicedArgmaxIsTheSequentialOne) {
  DI_REQUIRE_GPU();
  Stream stream;
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t vocab : {kSamplerVocab, int64_t{5}, int64_t{33}}) {
    std::vector<std::vector<float>> rows;
    std::vector<SamplingParams> params;
    auto base = [&](uint64_t seed) {
      std::vector<float> v = make_logits(Shape::kPeaked, seed);
      v.resize(static_cast<size_t>(vocab));
      return v;
    };
    rows.push_back(base(1));  // plain
    params.push_back(with(0.0));
    auto tie = base(2);  // the maximum twice, far apart (different slices when vocab is large)
    std::fill(tie.begin(), tie.end(), -1.0f);
    tie[static_cast<size_t>(vocab - 1)] = 9.0f;
    tie[static_cast<size_t>(vocab / 3)] = 9.0f;
    rows.push_back(tie);
    params.push_back(with(0.0));
    auto zeros = tie;  // -0.0 before +0.0 and +0.0 before -0.0: the lower id either way
    std::fill(zeros.begin(), zeros.end(), -1.0f);
    zeros[1] = -0.0f;
    zeros[3] = 0.0f;
    rows.push_back(zeros);
    params.push_back(with(0.0));
    std::swap(zeros[1], zeros[3]);
    rows.push_back(zeros);
    params.push_back(with(0.0));
    auto infs = base(3);
    infs[static_cast<size_t>(vocab - 1)] = inf;
    infs[static_cast<size_t>(vocab / 2)] = inf;
    rows.push_back(infs);
    params.push_back(with(0.0));
    rows.push_back(base(4));  // full path in the same launch: sampled, and greedy with logprobs
    params.push_back(with(1.0));
    rows.push_back(base(5));
    params.push_back(with(0.0));
    params.back().logprobs = 2;
    auto nan = base(6);
    nan[static_cast<size_t>(vocab - 2)] = std::nanf("");
    rows.push_back(nan);
    params.push_back(with(0.0));
    rows.push_back(std::vector<float>(static_cast<size_t>(vocab), -inf));
    params.push_back(with(0.0));

    const auto n = static_cast<int64_t>(rows.size());
    std::vector<float> logits;
    std::vector<int64_t> ids, want_tok;
    std::vector<int32_t> want_status;
    std::vector<SamplerRowParams> rps;
    SamplerScratch scratch;
    for (int64_t r = 0; r < n; ++r) {
      const auto& row = rows[static_cast<size_t>(r)];
      logits.insert(logits.end(), row.begin(), row.end());
      SamplerRow cpu_row;
      cpu_row.logits = row;
      cpu_row.seed = 11 + static_cast<uint64_t>(r);
      cpu_row.position = 5;
      const bool nan_row = r == n - 2, masked_row = r == n - 1;
      if (nan_row || masked_row) {  // the CPU throws; the GPU reports the status
        EXPECT_THROW(sample_row(params[static_cast<size_t>(r)], cpu_row, scratch), Error);
        want_tok.push_back(-1);
        want_status.push_back(
            static_cast<int32_t>(nan_row ? SamplerStatus::kNaN : SamplerStatus::kAllMasked));
      } else {
        want_tok.push_back(sample_row(params[static_cast<size_t>(r)], cpu_row, scratch).token_id);
        want_status.push_back(0);
      }
      rps.push_back(make_sampler_row(params[static_cast<size_t>(r)], cpu_row.seed, 5, {}, {}, {},
                                     false, vocab, ids));
    }
    EXPECT_EQ(want_tok[1], vocab / 3);
    EXPECT_EQ(want_tok[2], 1);
    EXPECT_EQ(want_tok[3], 1);
    EXPECT_EQ(want_tok[4], vocab / 2);
    ids.push_back(0);  // keep the ids buffer non-empty
    const SamplerRun run(logits, rps, ids, n, vocab, stream.get());
    const DeviceBuffer &tok = run.tok, &st = run.st;
    EXPECT_EQ(download<int64_t>(tok, static_cast<size_t>(n), stream.get()), want_tok)
        << "vocab " << vocab;
    EXPECT_EQ(download<int32_t>(st, static_cast<size_t>(n), stream.get()), want_status)
        << "vocab " << vocab;
  }
}

}  // namespace
}  // namespace di
