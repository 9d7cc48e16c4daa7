#include "engram/ngram_hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "engram/token_map.h"
#include "loader/safetensors.h"
#include "unit/engram/engram_test_util.h"

namespace di {
namespace {

using testing::engram_error_of;
using testing::engram_fixture_dir;
using testing::engram_fixture_present;
using testing::has_substr;

// Identity map over 16 ids, pad raw id 15 -> compressed 15. With multipliers 1, 16, 256 and ids
// below 16 the XOR chain never mixes bits, so r_1 = c0 + 16 c1 and r_2 = r_1 + 256 c2; the primes
// are large enough that the modulus is the identity. Row ids can then be written down by hand.
struct HandCase {
  CompressedTokenMap map{std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
                         16, "hand-map"};
  EngramHashParams params = [] {
    EngramHashParams p;
    p.layer_ids = {1};
    p.max_ngram = 3;
    p.n_heads = 1;
    p.columns = 2;
    p.pad_compressed_id = 15;
    p.multipliers = {1, 16, 256};
    p.primes = {1000003, 1000033};
    p.offsets = {0, 1000003};
    return p;
  }();
};

int64_t order2(int64_t c0, int64_t c1) {
  return c0 + 16 * c1;
}
int64_t order3(int64_t c0, int64_t c1, int64_t c2) {
  return c0 + 16 * c1 + 256 * c2 + 1000003;
}

TEST(EngramHash, HandMadeCaseWithDeadSpan) {
  HandCase h;
  const int64_t P = 15;
  std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> dead = {0, 0, 1, 0, 0, 0};  // position 2 is an image-span token
  EngramHistory history;
  std::vector<int64_t> out = engram_hash_chunk(h.params, h.map, ids, dead, history);
  std::vector<int64_t> expected = {
      order2(1, P), order3(1, P, P),  // t0: nothing before the start
      order2(2, 1), order3(2, 1, P),  // t1: the 3-gram would reach position -1
      order2(P, P), order3(P, P, P),  // t2: dead itself -> an all-pad n-gram
      order2(4, P), order3(4, P, P),  // t3: the look-back stops at the dead token
      order2(5, 4), order3(5, 4, P),  // t4: the 3-gram would reach the dead token
      order2(6, 5), order3(6, 5, 4),  // t5: clear of the span
  };
  EXPECT_EQ(out, expected);
  EXPECT_EQ(history.num_tokens, 6);
  EXPECT_EQ(history.recent[0], 6);
  EXPECT_EQ(history.recent[1], 5);
  EXPECT_EQ(history.recent[3], EngramHistory::kDead);
}

TEST(EngramHash, DeadTokensCarriedInHistoryBlockLaterChunks) {
  HandCase h;
  const int64_t P = 15;
  EngramHistory history;
  std::vector<int64_t> first = {7, 8};
  std::vector<uint8_t> first_dead = {0, 1};
  engram_hash_chunk(h.params, h.map, first, first_dead, history);
  EXPECT_EQ(history.recent[0], EngramHistory::kDead);
  std::vector<int64_t> next = {9, 10};
  std::vector<int64_t> out = engram_hash_chunk(h.params, h.map, next, {}, history);
  EXPECT_EQ(out,
            (std::vector<int64_t>{order2(9, P), order3(9, P, P), order2(10, 9), order3(10, 9, P)}));
}

// The reference semantics written out literally over a whole sequence (delta spec §2.4): a cache
// of compressed ids with DEAD entries, and for each position and look-back k a blocked flag that
// accumulates over k. Independent of the incremental EngramHistory formulation.
std::vector<int64_t> whole_sequence_oracle(const EngramHashParams& p, const CompressedTokenMap& map,
                                           const std::vector<int64_t>& ids,
                                           const std::vector<uint8_t>& dead) {
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> cache(ids.size());
  for (size_t t = 0; t < ids.size(); ++t)
    cache[t] = dead[t] ? -1 : map.lookup(ids[t]);
  std::vector<int64_t> out;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int64_t> tokens;
    bool blocked = false;
    for (int64_t k = 0; k < p.max_ngram; ++k) {
      const int64_t src = cache[static_cast<size_t>(std::max<int64_t>(t - k, 0))];
      blocked = blocked || t < k || src == -1;
      tokens.push_back(blocked ? p.pad_compressed_id : src);
    }
    for (int64_t layer = 0; layer < p.num_layers(); ++layer) {
      int64_t rolling = tokens[0] * p.multiplier(layer, 0);
      for (int64_t i = 1; i < p.max_ngram; ++i) {
        rolling ^= tokens[static_cast<size_t>(i)] * p.multiplier(layer, i);
        for (int64_t head = 0; head < p.n_heads; ++head) {
          const int64_t col = (i - 1) * p.n_heads + head;
          out.push_back(rolling % p.prime(layer, col) + p.offset(layer, col));
        }
      }
    }
  }
  return out;
}

struct Fixture {
  ModelConfig cfg;
  CompressedTokenMap map;
  EngramHashParams params;
};

Fixture load_fixture() {
  ModelConfig cfg = load_model_config(engram_fixture_dir());
  CompressedTokenMap map =
      CompressedTokenMap::load(engram_fixture_dir(), cfg.engram_compressed_vocab_size);
  EngramHashParams params = make_engram_hash_params(cfg, map);
  return {std::move(cfg), std::move(map), std::move(params)};
}

std::vector<int64_t> trace_i64(const SafetensorsFile& st, const std::string& name) {
  ConstTensorView v = st.view(name);
  EXPECT_EQ(v.dtype, DType::kI64) << name;
  // Trace tensors are not 8-byte aligned in the file: copy rather than view.
  std::vector<int64_t> out(v.nbytes() / sizeof(int64_t));
  std::memcpy(out.data(), v.data, out.size() * sizeof(int64_t));
  return out;
}

// Compares the [T][layers][columns] output with the trace's per-layer [T, columns] tensors.
void expect_matches_trace(const SafetensorsFile& trace, const std::string& run,
                          const EngramHashParams& p, const std::vector<int64_t>& out) {
  for (int64_t layer = 0; layer < p.num_layers(); ++layer) {
    const std::string name = run + ".layer." +
                             std::to_string(p.layer_ids[static_cast<size_t>(layer)]) +
                             ".engram.hash_ids";
    const std::vector<int64_t> expected = trace_i64(trace, name);
    const size_t tokens = expected.size() / static_cast<size_t>(p.columns);
    ASSERT_EQ(out.size(), tokens * static_cast<size_t>(p.num_layers() * p.columns)) << name;
    std::vector<int64_t> got;
    for (size_t t = 0; t < tokens; ++t) {
      const auto* row =
          out.data() + (t * static_cast<size_t>(p.num_layers()) + static_cast<size_t>(layer)) *
                           static_cast<size_t>(p.columns);
      got.insert(got.end(), row, row + p.columns);
    }
    EXPECT_EQ(got, expected) << name;
  }
}

TEST(EngramHash, MatchesFixtureTracePrefill) {
  if (!engram_fixture_present()) GTEST_SKIP() << "fixture not present";
  Fixture f = load_fixture();
  SafetensorsFile trace((engram_fixture_dir() / "trace.safetensors").string());
  const std::vector<int64_t> ids = trace_i64(trace, "prefill_L17.input_ids");
  ASSERT_EQ(ids.size(), 17u);
  EngramHistory history;
  std::vector<int64_t> out = engram_hash_chunk(f.params, f.map, ids, {}, history);
  expect_matches_trace(trace, "prefill_L17", f.params, out);
  EXPECT_EQ(out, whole_sequence_oracle(f.params, f.map, ids, std::vector<uint8_t>(ids.size())));
}

TEST(EngramHash, MatchesFixtureTraceDecodeWithCarriedHistory) {
  if (!engram_fixture_present()) GTEST_SKIP() << "fixture not present";
  Fixture f = load_fixture();
  SafetensorsFile trace((engram_fixture_dir() / "trace.safetensors").string());
  EngramHistory history;
  for (int step = -1; step <= 5; ++step) {
    const std::string run = "decode.step" + std::to_string(step);
    SCOPED_TRACE(run);
    const std::vector<int64_t> ids = trace_i64(trace, run + ".input_ids");
    ASSERT_EQ(trace_i64(trace, run + ".start_pos"), std::vector<int64_t>{history.num_tokens});
    std::vector<int64_t> out = engram_hash_chunk(f.params, f.map, ids, {}, history);
    expect_matches_trace(trace, run, f.params, out);
  }
  EXPECT_EQ(history.num_tokens, 19);
}

// A random sequence over the fixture vocab with a few dead spans.
void random_sequence(std::mt19937_64& rng, size_t n, int64_t vocab, std::vector<int64_t>& ids,
                     std::vector<uint8_t>& dead) {
  std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
  std::uniform_int_distribution<int> coin(0, 9);
  ids.resize(n);
  dead.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    ids[i] = tok(rng);
    // Spans of dead tokens start with probability 1/10 and continue with probability 1/2.
    if (coin(rng) == 0 || (i > 0 && dead[i - 1] && coin(rng) < 5)) dead[i] = 1;
  }
}

TEST(EngramHash, ChunkingInvariance) {
  if (!engram_fixture_present()) GTEST_SKIP() << "fixture not present";
  Fixture f = load_fixture();
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> ids;
    std::vector<uint8_t> dead;
    random_sequence(rng, 64, f.map.vocab_size(), ids, dead);
    EngramHistory whole_history;
    const std::vector<int64_t> whole = engram_hash_chunk(f.params, f.map, ids, dead, whole_history);
    EXPECT_EQ(whole, whole_sequence_oracle(f.params, f.map, ids, dead));

    // The same sequence in random chunks (including empty ones and single tokens).
    std::uniform_int_distribution<size_t> len(0, 9);
    EngramHistory history;
    std::vector<int64_t> chunked;
    for (size_t begin = 0; begin < ids.size();) {
      const size_t n = std::min(len(rng), ids.size() - begin);
      std::vector<int64_t> part =
          engram_hash_chunk(f.params, f.map, std::span<const int64_t>(ids).subspan(begin, n),
                            std::span<const uint8_t>(dead).subspan(begin, n), history);
      chunked.insert(chunked.end(), part.begin(), part.end());
      begin += n;
    }
    EXPECT_EQ(chunked, whole) << "trial " << trial;
    EXPECT_EQ(history, whole_history);
  }
}

TEST(EngramHash, RollbackByCopyingTheHistory) {
  if (!engram_fixture_present()) GTEST_SKIP() << "fixture not present";
  Fixture f = load_fixture();
  const std::vector<int64_t> prompt = {762, 882, 448, 365, 172};
  const std::vector<int64_t> draft = {1129, 538, 473, 1095};
  const size_t accepted = 2;

  EngramHistory history;
  engram_hash_chunk(f.params, f.map, prompt, {}, history);
  const EngramHistory checkpoint = history;
  engram_hash_chunk(f.params, f.map, draft, {}, history);  // speculative verify
  // Reject the tail: restore and replay only the accepted tokens.
  history = checkpoint;
  engram_advance_history(f.params, f.map, std::span<const int64_t>(draft).first(accepted), {},
                         history);

  EngramHistory direct;
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), draft.begin(), draft.begin() + accepted);
  engram_hash_chunk(f.params, f.map, seq, {}, direct);
  EXPECT_EQ(history, direct);
  EXPECT_EQ(history.num_tokens, 7);

  // The next token hashes identically on both paths.
  const std::vector<int64_t> next = {1205};
  EXPECT_EQ(engram_hash_chunk(f.params, f.map, next, {}, history),
            engram_hash_chunk(f.params, f.map, next, {}, direct));
}

TEST(EngramHash, BadInputsThrowWithoutTouchingHistory) {
  HandCase h;
  EngramHistory history;
  const std::vector<int64_t> ids = {1, 2, 16};
  std::string msg = engram_error_of([&] { engram_hash_chunk(h.params, h.map, ids, {}, history); });
  EXPECT_TRUE(has_substr(msg, "token id 16"));
  EXPECT_EQ(history, EngramHistory{});

  const std::vector<int64_t> ok = {1, 2};
  const std::vector<uint8_t> short_mask = {0};
  EXPECT_TRUE(has_substr(
      engram_error_of([&] { engram_hash_chunk(h.params, h.map, ok, short_mask, history); }),
      "dead mask has 1 entries for 2 tokens"));
  std::vector<int64_t> small_out(3);
  EXPECT_TRUE(has_substr(
      engram_error_of([&] { engram_hash_chunk(h.params, h.map, ok, {}, history, small_out); }),
      "output has 3 entries"));
  EXPECT_EQ(history, EngramHistory{});
}

}  // namespace
}  // namespace di
