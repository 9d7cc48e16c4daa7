// Lightning indexer on the GPU vs the CPU reference ops (kernels/cpu/indexer.h): scores bitwise
// (decode and prefill, real 32 x 128 dims, paged keys with shuffled page ids), top-k sets
// identical including planted ties, rows with fewer visible keys than k and -inf rows, the
// layer-20 candidate pool and the Reindex mask identical.

#include "kernels/cuda/indexer/indexer.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "common/check.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/kv_pack.h"
#include "kernels/dense_ops/dense_ops_test_util.h"
#include "tests_support/error_of.h"

namespace di {
namespace {

using dense_test::download;
using dense_test::float_bits;
using dense_test::poisoned;
using dense_test::upload;

constexpr int kHeads = kIndexHeads;  // 32
constexpr int kDim = kIndexDim;      // 128
constexpr float kInf = std::numeric_limits<float>::infinity();

// 128 values with a random power-of-two magnitude per 32-block (2^-exp_range .. 2^exp_range),
// quantised and packed like an index key; `unpacked` gets the FP4-simulated values the CPU
// reference sees. exp_range 0 or 1 gives rows whose block scales mostly span <= 3 octaves (the
// kernel's chained-integer path; the natural amax spread adds ~1), 6 mostly wider ones (the
// per-block path).
void random_fp4_row(std::mt19937_64& rng, uint8_t* packed, float* unpacked, int exp_range) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(-exp_range, exp_range);
  float x[kDim];
  for (int b = 0; b < kDim / 32; ++b) {
    const float s = std::ldexp(1.0f, ed(rng));
    for (int d = b * 32; d < b * 32 + 32; ++d)
      x[d] = nd(rng) * s;
  }
  cpu::pack_index_key(std::span<const float>(x, kDim), std::span<uint8_t>(packed, kIndexKeyBytes));
  cpu::unpack_index_key(std::span<const uint8_t>(packed, kIndexKeyBytes),
                        std::span<float>(unpacked, kDim));
}

// Index keys of a batch of sequences in a paged pool: 61 entries per page (so key tiles straddle
// pages), 4 spare bytes per page, page ids a shuffled permutation with spare pages; page-table
// slots past a sequence's pages hold an id far outside the pool (never to be read).
struct KeyCache {
  static constexpr int kEntriesPerPage = 61;
  static constexpr int64_t kPageBytes = kEntriesPerPage * kIndexKeyBytes + 4;
  std::vector<std::vector<float>> keys;  // per sequence [len, 128] unpacked
  std::vector<int32_t> pages;            // [batch, pages_stride]
  int32_t pages_stride = 0;
  DeviceBuffer pool_dev, pages_dev;

  KeyCache(const std::vector<int64_t>& lens, uint64_t seed, int exp_range, cudaStream_t stream) {
    std::mt19937_64 rng(seed);
    int64_t total_pages = 0;
    for (int64_t len : lens) {
      const int64_t np = (len + kEntriesPerPage - 1) / kEntriesPerPage;
      total_pages += np;
      pages_stride = std::max(pages_stride, static_cast<int32_t>(np + 1));
    }
    const int64_t pool_pages = total_pages + 3;
    std::vector<int32_t> ids(static_cast<size_t>(pool_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<uint8_t> pool(static_cast<size_t>(pool_pages * kPageBytes), 0xEE);
    pages.assign(lens.size() * static_cast<size_t>(pages_stride), 0x3FFFFFFF);
    size_t next = 0;
    keys.resize(lens.size());
    for (size_t s = 0; s < lens.size(); ++s) {
      const int64_t np = (lens[s] + kEntriesPerPage - 1) / kEntriesPerPage;
      for (int64_t p = 0; p < np; ++p)
        pages[s * static_cast<size_t>(pages_stride) + static_cast<size_t>(p)] = ids[next++];
      keys[s].resize(static_cast<size_t>(lens[s] * kDim));
      for (int64_t t = 0; t < lens[s]; ++t) {
        const int32_t page =
            pages[s * static_cast<size_t>(pages_stride) + static_cast<size_t>(t / kEntriesPerPage)];
        uint8_t* e = pool.data() + page * kPageBytes + (t % kEntriesPerPage) * kIndexKeyBytes;
        random_fp4_row(rng, e, keys[s].data() + t * kDim, exp_range);
      }
    }
    pool_dev = upload(pool, stream, "indexer test key pool");
    pages_dev = upload(pages, stream, "indexer test page table");
  }

  PagedTable table() {
    PagedTable t;
    t.pool = pool_dev.as<uint8_t>();
    t.page_bytes = kPageBytes;
    t.pages = pages_dev.as<int32_t>();
    t.pages_stride = pages_stride;
    t.entries_per_page = kEntriesPerPage;
    t.entry_bytes = kIndexKeyBytes;
    return t;
  }
};

// Runs indexer_score on `rows` query rows (row r: sequence seq[r], visible[r]) and checks every
// score bitwise against cpu::indexer_score<float>, and that the stride padding is untouched.
void check_scores(KeyCache& cache, const std::vector<int32_t>& seq,
                  const std::vector<int32_t>& visible, int64_t n_cols, uint64_t seed,
                  bool rows_share_keys, int exp_range = 1, std::vector<float>* scores_out = nullptr,
                  const std::function<void(std::vector<float>&)>& edit_weights = {}) {
  Stream stream;
  const int64_t rows = static_cast<int64_t>(seq.size());
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> q(static_cast<size_t>(rows * kIndexQueryBytes));
  std::vector<float> q_vals(static_cast<size_t>(rows * kHeads * kDim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < kHeads; ++h) {
      random_fp4_row(rng, q.data() + (r * kHeads + h) * kIndexKeyBytes,
                     q_vals.data() + (r * kHeads + h) * kDim, exp_range);
    }
  }
  // Weights of the size weights_proj(x) * 128^-1/2 * 32^-1/2 gives, both signs.
  std::vector<float> w =
      dense_test::random_normal(static_cast<size_t>(rows * kHeads), seed + 1, 1.0f / 64.0f);
  if (edit_weights) edit_weights(w);
  const int64_t stride = n_cols + 5;
  auto q_dev = upload(q, stream.get(), "q");
  auto w_dev = upload(w, stream.get(), "weights");
  auto seq_dev = upload(seq, stream.get(), "row_seq");
  auto vis_dev = upload(visible, stream.get(), "row_visible");
  auto out_dev = poisoned<float>(static_cast<size_t>(rows * stride), stream.get());
  IndexerScoreParams p;
  p.q = q_dev.as<uint8_t>();
  p.weights = w_dev.as<float>();
  p.keys = cache.table();
  p.row_seq = seq_dev.as<int32_t>();
  p.row_visible = vis_dev.as<int32_t>();
  p.rows = rows;
  p.rows_share_keys = rows_share_keys;
  p.n_cols = n_cols;
  p.score_stride = stride;
  p.scores = out_dev.as<float>();
  indexer_score(p, stream.get());
  const auto got = download<float>(out_dev, static_cast<size_t>(rows * stride), stream.get());

  std::vector<float> want(static_cast<size_t>(n_cols));
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& keys = cache.keys[static_cast<size_t>(seq[static_cast<size_t>(r)])];
    ASSERT_LE(visible[static_cast<size_t>(r)], static_cast<int64_t>(keys.size()) / kDim);
    cpu::indexer_score<float>(q_vals.data() + r * kHeads * kDim, w.data() + r * kHeads, keys.data(),
                              n_cols, visible[static_cast<size_t>(r)], kHeads, kDim, want.data());
    for (int64_t t = 0; t < stride; ++t) {
      const uint32_t g = float_bits(got[static_cast<size_t>(r * stride + t)]);
      const uint32_t e = t < n_cols ? float_bits(want[static_cast<size_t>(t)]) : 0xFFFFFFFFu;
      if (g != e && bad++ < 8) {
        ADD_FAILURE() << "row " << r << " t " << t << ": got 0x" << std::hex << g << " want 0x" << e
                      << std::dec;
      }
    }
    if (scores_out != nullptr) {
      scores_out->insert(scores_out->end(), got.begin() + r * stride,
                         got.begin() + r * stride + n_cols);
    }
  }
  EXPECT_EQ(bad, 0) << "mismatching scores of " << rows << " rows x " << n_cols;
}

TEST(IndexerKernel, DecodeScoresBitwiseSingleSequence) {
  DI_REQUIRE_GPU();
  for (int exp_range : {0, 6}) {
    for (int64_t len : {int64_t{1}, int64_t{100}, int64_t{4096}, int64_t{65536}}) {
      SCOPED_TRACE(testing::Message() << "len=" << len << " exp_range=" << exp_range);
      Stream stream;
      KeyCache cache({len}, 11 + static_cast<uint64_t>(len), exp_range, stream.get());
      check_scores(cache, {0}, {static_cast<int32_t>(len)}, len, 100 + static_cast<uint64_t>(len),
                   false, exp_range);
    }
  }
}

TEST(IndexerKernel, DecodeScoresBitwiseBatchOfSequences) {
  DI_REQUIRE_GPU();
  for (int exp_range : {1, 6}) {
    SCOPED_TRACE(exp_range);
    Stream stream;
    const std::vector<int64_t> lens = {1, 100, 4096, 65536, 777, 3000};
    KeyCache cache(lens, 21, exp_range, stream.get());
    // Row r of sequence r; n_cols = the longest context, so shorter rows get -inf tails. The last
    // row sees fewer keys than its sequence holds.
    check_scores(cache, {0, 1, 2, 3, 4, 5}, {1, 100, 4096, 65536, 777, 2500}, 65536, 22, false,
                 exp_range);
  }
}

// Weights whose product with a head's q scale is not a normal float (so the decode kernel's
// relu(S * ks) * (qs * w) would round twice): those rows must take the per-block path; a zero
// weight may stay on the fast one. Row 0 keeps ordinary weights.
TEST(IndexerKernel, DecodeScoresBitwiseWithTinyAndZeroWeights) {
  DI_REQUIRE_GPU();
  Stream stream;
  const std::vector<int64_t> lens = {3000, 3000, 3000};
  KeyCache cache(lens, 41, 0, stream.get());
  check_scores(cache, {0, 1, 2}, {3000, 2999, 2048}, 3000, 42, false, 0, nullptr,
               [](std::vector<float>& w) {
                 w[1 * kHeads + 5] = 1e-39f;   // a subnormal weight
                 w[1 * kHeads + 6] = -3e-38f;  // normal, but qs * w is subnormal
                 w[2 * kHeads + 0] = 0.0f;
                 w[2 * kHeads + 31] = -0.0f;
               });
}

TEST(IndexerKernel, PrefillScoresBitwiseCausal) {
  DI_REQUIRE_GPU();
  Stream stream;
  // Chunked prefill of 2 sequences at ratio 2: a 37-row chunk at positions 8000.. of sequence 0
  // (4032 keys cached) and a 27-row chunk from the start of sequence 1. Rows of both share CTAs.
  const std::vector<int64_t> lens = {4032, 14};
  KeyCache cache(lens, 31, 1, stream.get());
  std::vector<int32_t> seq, visible;
  for (int i = 0; i < 37; ++i) {
    seq.push_back(0);
    visible.push_back((8000 + i + 1) / 2);
  }
  for (int i = 0; i < 27; ++i) {
    seq.push_back(1);
    visible.push_back((i + 1) / 2);  // 0 for the first row
  }
  // Both work splits: prefill (8 rows per CTA; one CTA holds rows of both sequences) and decode;
  // queries with narrow and wide block-scale spreads.
  for (int q_range : {0, 6}) {
    check_scores(cache, seq, visible, 4032, 32, true, q_range);
    check_scores(cache, seq, visible, 4032, 32, false, q_range);
  }
}

TEST(IndexerKernel, PrefillScoresBitwiseLongChunk) {
  DI_REQUIRE_GPU();
  Stream stream;
  KeyCache cache({16384}, 41, 1, stream.get());
  std::vector<int32_t> seq(96, 0), visible(96);
  for (int i = 0; i < 96; ++i)
    visible[static_cast<size_t>(i)] = 16384 - 95 * 170 + i * 170;  // 234 .. 16384
  check_scores(cache, seq, visible, 16384, 42, true);
}

// ---- top-k ----

void check_topk(const std::vector<float>& scores, int64_t rows, int64_t n, int64_t stride,
                const std::vector<int32_t>& visible, int k, int ctas_per_row = 0) {
  Stream stream;
  const int64_t k_eff = std::min<int64_t>(k, n);
  const int64_t out_stride = k_eff + 3;
  auto s_dev = upload(scores, stream.get(), "scores");
  auto v_dev = upload(visible, stream.get(), "visible");
  // 0xEE bytes: distinct from the -1 padding the kernel writes.
  DeviceBuffer o_dev(static_cast<size_t>(rows * out_stride) * sizeof(int32_t), "top-k out");
  o_dev.fill_async(0xEE, stream.get());
  IndexerTopkParams p;
  p.scores = s_dev.as<float>();
  p.row_visible = v_dev.as<int32_t>();
  p.rows = rows;
  p.n = n;
  p.score_stride = stride;
  p.k = k;
  p.out = o_dev.as<int32_t>();
  p.out_stride = out_stride;
  p.ctas_per_row = ctas_per_row;
  indexer_topk(p, stream.get());
  const auto got = download<int32_t>(o_dev, static_cast<size_t>(rows * out_stride), stream.get());
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<int32_t> want =
        cpu::select_topk<float>(scores.data() + r * stride, n, visible[static_cast<size_t>(r)], k);
    std::vector<int32_t> row(got.begin() + r * out_stride, got.begin() + r * out_stride + k_eff);
    EXPECT_EQ(row, want) << "row " << r << " (n=" << n << ", k=" << k
                         << ", ctas_per_row=" << ctas_per_row << ")";
    for (int64_t i = k_eff; i < out_stride; ++i)
      EXPECT_EQ(static_cast<uint32_t>(got[static_cast<size_t>(r * out_stride + i)]), 0xEEEEEEEEu)
          << "stride padding clobbered";
  }
}

// Rows exercising every path: random (list path), planted ties at and around the threshold, a
// huge tie group (global fallback path), a narrow value range (fallback with a real radix
// refinement), fewer visible than k, all -inf, finite values past `visible`, -0 / +0 ties.
std::vector<float> topk_rows(int64_t n, int64_t stride, int k, std::vector<int32_t>* visible,
                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pos(0, n - 1);
  std::vector<float> s;
  auto add_row = [&](std::vector<float> row, int32_t vis) {
    row.resize(static_cast<size_t>(stride), 12345.0f);  // stride padding must not be read
    s.insert(s.end(), row.begin(), row.end());
    visible->push_back(vis);
  };
  const auto n32 = static_cast<int32_t>(n);
  std::vector<float> base(static_cast<size_t>(n));
  for (auto& x : base)
    x = nd(rng);
  add_row(base, n32);  // 0: random
  {
    // 1: ties at the k-th value: 3k copies of one value inside the top range.
    std::vector<float> r = base;
    std::vector<float> sorted = base;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const float tie = sorted[static_cast<size_t>(std::min<int64_t>(k, n) / 2)];
    for (int i = 0; i < 3 * k; ++i)
      r[static_cast<size_t>(pos(rng))] = tie;
    add_row(r, n32);
  }
  {
    // 2: 6000 equal maxima (more than the shared list holds) -> the lowest-index k of them.
    std::vector<float> r = base;
    for (int i = 0; i < 6000; ++i)
      r[static_cast<size_t>(pos(rng))] = 7.5f;
    add_row(r, n32);
  }
  {
    // 3: all values within [1, 1 + 2^-6): one top-12-bit bin, distinct low bits, some ties.
    std::vector<float> r(static_cast<size_t>(n));
    std::uniform_int_distribution<uint32_t> mant(0, (1u << 17) - 1);
    for (auto& x : r) {
      const uint32_t bits = 0x3F800000u | mant(rng);
      std::memcpy(&x, &bits, 4);
    }
    add_row(r, n32);
  }
  {
    // 4: fewer visible than k, -inf past visible (the scoring kernel's output shape).
    std::vector<float> r = base;
    const int64_t vis = std::min<int64_t>(n, k / 3 + 1);
    for (int64_t t = vis; t < n; ++t)
      r[static_cast<size_t>(t)] = -kInf;
    add_row(r, static_cast<int32_t>(vis));
  }
  add_row(std::vector<float>(static_cast<size_t>(n), -kInf), n32);  // 5: all -inf
  {
    // 6: finite values past `visible` take part in the selection and are then dropped.
    std::vector<float> r = base;
    const int64_t vis = n / 2;
    for (int64_t t = vis; t < n; t += 3)
      r[static_cast<size_t>(t)] = 50.0f;
    add_row(r, static_cast<int32_t>(vis));
  }
  {
    // 7: zeros of both signs (relu outputs) mixed with negatives: -0 == +0 ties by position.
    std::vector<float> r(static_cast<size_t>(n));
    for (size_t t = 0; t < r.size(); ++t)
      r[t] = (t % 3 == 0) ? -0.0f : (t % 3 == 1 ? 0.0f : -1.0f - static_cast<float>(t % 7));
    add_row(r, n32);
  }
  {
    // 8: a few +inf and large values, negatives only otherwise.
    std::vector<float> r(static_cast<size_t>(n));
    for (auto& x : r)
      x = -std::fabs(nd(rng)) - 1.0f;
    for (int i = 0; i < 5; ++i)
      r[static_cast<size_t>(pos(rng))] = kInf;
    add_row(r, n32);
  }
  return s;
}

TEST(IndexerKernel, TopkMatchesCpuIncludingTies) {
  DI_REQUIRE_GPU();
  for (int64_t n : {int64_t{65536}, int64_t{65533}, int64_t{4096}, int64_t{100}, int64_t{1}}) {
    for (int k : {512, 1, 2048, 100}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
      const int64_t stride = (n + 3) / 4 * 4 + 4;
      std::vector<int32_t> visible;
      const auto s = topk_rows(n, stride, k, &visible, 51 + static_cast<uint64_t>(n + k));
      check_topk(s, static_cast<int64_t>(visible.size()), n, stride, visible, k);
    }
  }
}

// Every cluster size of the sliced kernel, and the whole-row kernel (-1), on the same rows:
// slices of a few positions (most CTAs empty), slices that do not end on a 16-byte boundary, the
// largest slices, and the many-ties rows whose candidates overflow the list (CTA 0 falls back to
// the global row).
TEST(IndexerKernel, TopkEverySliceCountMatchesCpu) {
  DI_REQUIRE_GPU();
  for (int ctas : {-1, 1, 2, 4, 8}) {
    for (int64_t n : {int64_t{36864} * std::max(ctas, 1), int64_t{65533} / (9 - ctas),
                      int64_t{4099}, int64_t{37}}) {
      for (int k : {512, 2048, 3}) {
        SCOPED_TRACE(testing::Message() << "ctas=" << ctas << " n=" << n << " k=" << k);
        const int64_t stride = (n + 3) / 4 * 4 + 8;
        std::vector<int32_t> visible;
        const auto s = topk_rows(n, stride, k, &visible, 81 + static_cast<uint64_t>(n + k + ctas));
        check_topk(s, static_cast<int64_t>(visible.size()), n, stride, visible, k, ctas);
      }
    }
  }
}

// The cached kernel (-2: the row read once, its 16-bit keys in shared memory) at its largest row,
// and the many-rows plan that chooses it.
TEST(IndexerKernel, TopkCachedKernelMatchesCpu) {
  DI_REQUIRE_GPU();
  for (int64_t n : {int64_t{73728}, int64_t{65536}, int64_t{40003}, int64_t{4101}, int64_t{31}}) {
    for (int k : {512, 2048, 1}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
      const int64_t stride = (n + 3) / 4 * 4 + 4;
      std::vector<int32_t> visible;
      const auto s = topk_rows(n, stride, k, &visible, 101 + static_cast<uint64_t>(n + k));
      check_topk(s, static_cast<int64_t>(visible.size()), n, stride, visible, k, -2);
    }
  }
}

TEST(IndexerKernel, TopkManyRowsMatchCpu) {
  DI_REQUIRE_GPU();
  const int64_t n = 40003, stride = 40008;
  std::vector<int32_t> visible;
  std::vector<float> s;
  for (uint64_t seed = 0; s.size() < static_cast<size_t>(150 * stride); ++seed) {
    const auto rows = topk_rows(n, stride, 512, &visible, 91 + seed);
    s.insert(s.end(), rows.begin(), rows.end());
  }
  check_topk(s, static_cast<int64_t>(visible.size()), n, stride, visible, 512);
}

TEST(IndexerKernel, TopkLongRow) {
  DI_REQUIRE_GPU();
  // 262,151 positions: eight slices; 300,007: longer than eight slices hold, so one CTA per row
  // reads the row from global memory.
  for (int64_t n : {int64_t{262144 + 7}, int64_t{300007}}) {
    const int64_t stride = (n + 3) / 4 * 4 + 4;
    std::vector<int32_t> visible;
    const auto s = topk_rows(n, stride, 512, &visible, 61);
    check_topk(s, static_cast<int64_t>(visible.size()), n, stride, visible, 512);
  }
}

TEST(IndexerKernel, TopkOfKernelScores) {
  DI_REQUIRE_GPU();
  Stream stream;
  const std::vector<int64_t> lens = {65536, 300, 9000};
  KeyCache cache(lens, 71, 1, stream.get());
  std::vector<float> scores;
  const std::vector<int32_t> visible = {65536, 300, 8999};
  check_scores(cache, {0, 1, 2}, visible, 65536, 72, false, 1, &scores);
  check_topk(scores, 3, 65536, 65536, visible, 512);
}

// ---- candidate pool and Reindex mask ----

void check_candidates(const std::vector<float>& scores, int64_t rows, int64_t n, int64_t stride,
                      const std::vector<int32_t>& visible, int block_size, int topk_blocks) {
  Stream stream;
  const int64_t mask_stride = n + 9;
  auto s_dev = upload(scores, stream.get(), "scores");
  auto v_dev = upload(visible, stream.get(), "visible");
  auto m_dev = poisoned<uint8_t>(static_cast<size_t>(rows * mask_stride), stream.get());
  DeviceBuffer ws(
      std::max<size_t>(indexer_candidates_workspace_bytes(rows, n, block_size, topk_blocks), 16),
      "candidate workspace");
  IndexerCandidateParams p;
  p.scores = s_dev.as<float>();
  p.row_visible = v_dev.as<int32_t>();
  p.rows = rows;
  p.n = n;
  p.score_stride = stride;
  p.block_size = block_size;
  p.topk_blocks = topk_blocks;
  p.workspace = ws.data();
  p.mask = m_dev.as<uint8_t>();
  p.mask_stride = mask_stride;
  indexer_candidates(p, stream.get());
  const auto got = download<uint8_t>(m_dev, static_cast<size_t>(rows * mask_stride), stream.get());
  std::vector<uint8_t> want(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    cpu::candidate_pool<float>(scores.data() + r * stride, n, visible[static_cast<size_t>(r)],
                               block_size, topk_blocks, want.data());
    std::vector<uint8_t> row(got.begin() + r * mask_stride, got.begin() + r * mask_stride + n);
    EXPECT_EQ(row, want) << "row " << r << " (n=" << n << ", topk_blocks=" << topk_blocks << ")";
    EXPECT_EQ(got[static_cast<size_t>(r * mask_stride + n)], 0xFF) << "mask padding clobbered";
  }

  // The Reindex mask with this pool: -inf outside it (mask_len = n), bitwise.
  auto t_dev = upload(scores, stream.get(), "reindex scores");
  IndexerMaskParams mp;
  mp.scores = t_dev.as<float>();
  mp.rows = rows;
  mp.n = n;
  mp.score_stride = stride;
  mp.mask = m_dev.as<uint8_t>();
  mp.mask_stride = mask_stride;
  mp.mask_len = n;
  indexer_apply_mask(mp, stream.get());
  const auto masked = download<float>(t_dev, scores.size(), stream.get());
  std::vector<float> ref = scores;
  for (int64_t r = 0; r < rows; ++r) {
    cpu::apply_candidate_mask<float>(ref.data() + r * stride, n, got.data() + r * mask_stride, n);
  }
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    bad += float_bits(ref[i]) != float_bits(masked[i]) ? 1 : 0;
  EXPECT_EQ(bad, 0) << "apply_mask mismatches";
}

TEST(IndexerKernel, CandidatePoolMatchesCpu) {
  DI_REQUIRE_GPU();
  // Layer 20 is ratio 1: n = the context. Rows: random scores with -inf past visible (block maxima
  // tie only by chance), planted equal block maxima, few blocks, visible = 0.
  for (int64_t n : {int64_t{65536}, int64_t{16389}, int64_t{100}}) {
    for (int topk_blocks : {2048, 7}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " topk_blocks=" << topk_blocks);
      std::mt19937_64 rng(81 + static_cast<uint64_t>(n));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      const int64_t stride = (n + 3) / 4 * 4;
      std::vector<float> s;
      std::vector<int32_t> visible;
      const std::vector<int64_t> vis = {n, n / 2 + 3, n / 3, 0};
      for (size_t r = 0; r < vis.size(); ++r) {
        std::vector<float> row(static_cast<size_t>(stride), 999.0f);
        for (int64_t t = 0; t < n; ++t)
          row[static_cast<size_t>(t)] = t < vis[r] ? std::max(nd(rng), 0.0f) : -kInf;
        if (r == 1) {
          // Equal block maxima everywhere in the first half: ties broken by block index.
          for (int64_t t = 0; t < vis[r]; t += 16)
            row[static_cast<size_t>(t)] = 9.0f;
        }
        s.insert(s.end(), row.begin(), row.end());
        visible.push_back(static_cast<int32_t>(vis[r]));
      }
      check_candidates(s, static_cast<int64_t>(visible.size()), n, stride, visible, 8, topk_blocks);
    }
  }
}

TEST(IndexerKernel, ApplyMaskShortMask) {
  DI_REQUIRE_GPU();
  Stream stream;
  const int64_t rows = 3, n = 1000, stride = 1004, mask_len = 700, mask_stride = 704;
  std::vector<float> s = dense_test::random_normal(static_cast<size_t>(rows * stride), 91);
  std::vector<uint8_t> mask(static_cast<size_t>(rows * mask_stride));
  std::mt19937_64 rng(92);
  for (auto& m : mask)
    m = static_cast<uint8_t>(rng() % 3);  // 0, 1, 2 (nonzero = kept)
  auto s_dev = upload(s, stream.get(), "scores");
  auto m_dev = upload(mask, stream.get(), "mask");
  IndexerMaskParams p;
  p.scores = s_dev.as<float>();
  p.rows = rows;
  p.n = n;
  p.score_stride = stride;
  p.mask = m_dev.as<uint8_t>();
  p.mask_stride = mask_stride;
  p.mask_len = mask_len;
  indexer_apply_mask(p, stream.get());
  const auto got = download<float>(s_dev, s.size(), stream.get());
  for (int64_t r = 0; r < rows; ++r)
    cpu::apply_candidate_mask<float>(s.data() + r * stride, n, mask.data() + r * mask_stride,
                                     mask_len);
  for (size_t i = 0; i < s.size(); ++i)
    ASSERT_EQ(float_bits(got[i]), float_bits(s[i])) << "at " << i;
}

TEST(IndexerKernel, LaunchersRejectBadParams) {
  IndexerTopkParams p;
  p.rows = 1;
  p.n = 10;
  p.score_stride = 12;
  p.k = 4096;  // above kIndexTopkMax
  p.out_stride = 10;
  EXPECT_THROW(indexer_topk(p, nullptr), Error);
  p.k = 512;
  p.ctas_per_row = 3;  // not 0, 1, 2, 4 or 8
  EXPECT_NE(test::error_of([&] { indexer_topk(p, nullptr); }).find("ctas_per_row 3"),
            std::string::npos);
  // One CTA cannot hold the row: rejected before any launch (the pointers are never used).
  alignas(16) float scores[4] = {};
  int32_t out[4] = {};
  p.scores = scores;
  p.out = out;
  p.n = 36865;
  p.score_stride = 36868;
  p.out_stride = 512;
  p.ctas_per_row = 1;
  EXPECT_NE(test::error_of([&] { indexer_topk(p, nullptr); }).find("36868 positions per CTA"),
            std::string::npos);
  p.n = 73729;  // past what the cached kernel holds
  p.score_stride = 73732;
  p.ctas_per_row = -2;
  EXPECT_NE(test::error_of([&] { indexer_topk(p, nullptr); }).find("at most 73728 positions"),
            std::string::npos);
  IndexerScoreParams sp;
  sp.rows = 1;
  sp.n_cols = 10;
  sp.score_stride = 5;  // < n_cols
  EXPECT_THROW(indexer_score(sp, nullptr), Error);
}

}  // namespace
}  // namespace di
