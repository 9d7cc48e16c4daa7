// The lightning indexer at widths other than 32 heads x 128 (the small test models: 8 x 64, plus
// 4 x 96 and 16 x 128) and the query packer: indexer_score's generic kernel bitwise against
// cpu::indexer_score<float> on the unpacked FP4 values (decode and prefill rows, paged keys with
// shuffled page ids, -inf tails, untouched stride padding), index_query_pack's bytes identical to
// cpu::pack_index_key at 32 x 128 and 8 x 64 for fp32 and bf16 inputs, and the two chained (pack
// on the GPU, then score). Launcher rejections run without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "common/error.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/kv_pack.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/indexer/indexer.cuh"
#include "kernels/dense_ops/dense_ops_test_util.h"

namespace di::indexer_generic_test {
namespace {

using dense_test::download;
using dense_test::float_bits;
using dense_test::from_bf16;
using dense_test::poisoned;
using dense_test::to_bf16;
using dense_test::upload;

// dim values with a random power-of-two magnitude per 32-block (2^-exp_range .. 2^exp_range).
std::vector<float> random_row(std::mt19937_64& rng, int dim, int exp_range) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(-exp_range, exp_range);
  std::vector<float> x(static_cast<size_t>(dim));
  for (int b = 0; b < dim; b += 32) {
    const float s = std::ldexp(1.0f, ed(rng));
    for (int d = b; d < b + 32; ++d)
      x[static_cast<size_t>(d)] = nd(rng) * s;
  }
  return x;
}

// `rows` such rows, concatenated.
std::vector<float> random_rows(std::mt19937_64& rng, int64_t rows, int dim, int exp_range) {
  std::vector<float> x;
  for (int64_t r = 0; r < rows; ++r) {
    const auto v = random_row(rng, dim, exp_range);
    x.insert(x.end(), v.begin(), v.end());
  }
  return x;
}

// Packs x as an index-key row at `packed` and returns the FP4-simulated values.
std::vector<float> pack_row(const std::vector<float>& x, uint8_t* packed) {
  const auto bytes = static_cast<size_t>(index_key_bytes(static_cast<int>(x.size())));
  std::vector<float> v(x.size());
  cpu::pack_index_key(x, std::span<uint8_t>(packed, bytes));
  cpu::unpack_index_key(std::span<const uint8_t>(packed, bytes), v);
  return v;
}

// Index keys of width dim for a batch of sequences in a paged pool: 13 entries per page, page ids
// shuffled, unused page-table slots far outside the pool (never read).
struct KeyCache {
  static constexpr int kPerPage = 13;
  int dim;
  int64_t page_bytes;
  std::vector<std::vector<float>> keys;  // per sequence [len, dim] unpacked
  std::vector<int32_t> pages;
  int32_t pages_stride = 0;
  DeviceBuffer pool_dev, pages_dev;

  KeyCache(int dim_, const std::vector<int64_t>& lens, uint64_t seed, int exp_range,
           cudaStream_t stream)
      : dim(dim_), page_bytes((kPerPage * index_key_bytes(dim_) + 7 + 15) / 16 * 16) {
    std::mt19937_64 rng(seed);
    int64_t total = 0;
    for (int64_t len : lens) {
      const int64_t np = (len + kPerPage - 1) / kPerPage;
      total += np;
      pages_stride = std::max(pages_stride, static_cast<int32_t>(np + 1));
    }
    const int64_t pool_pages = total + 2;
    std::vector<int32_t> ids(static_cast<size_t>(pool_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<uint8_t> pool(static_cast<size_t>(pool_pages * page_bytes), 0xEE);
    pages.assign(lens.size() * static_cast<size_t>(pages_stride), 0x3FFFFFFF);
    size_t next = 0;
    keys.resize(lens.size());
    for (size_t s = 0; s < lens.size(); ++s) {
      const size_t row0 = s * static_cast<size_t>(pages_stride);
      for (int64_t p = 0; p < (lens[s] + kPerPage - 1) / kPerPage; ++p)
        pages[row0 + static_cast<size_t>(p)] = ids[next++];
      for (int64_t t = 0; t < lens[s]; ++t) {
        const int32_t page = pages[row0 + static_cast<size_t>(t / kPerPage)];
        uint8_t* e = pool.data() + page * page_bytes + (t % kPerPage) * index_key_bytes(dim);
        const auto v = pack_row(random_row(rng, dim, exp_range), e);
        keys[s].insert(keys[s].end(), v.begin(), v.end());
      }
    }
    pool_dev = upload(pool, stream, "indexer generic test key pool");
    pages_dev = upload(pages, stream, "indexer generic test page table");
  }

  PagedTable table() const {
    PagedTable t;
    t.pool = const_cast<uint8_t*>(pool_dev.as<uint8_t>());
    t.page_bytes = page_bytes;
    t.pages = pages_dev.as<int32_t>();
    t.pages_stride = pages_stride;
    t.entries_per_page = kPerPage;
    t.entry_bytes = index_key_bytes(dim);
    return t;
  }
};

// Scores `rows` query rows of `heads` x cache.dim (q packed on the CPU, or on the GPU with
// index_query_pack when gpu_pack) and checks them bitwise against cpu::indexer_score<float>,
// with the stride padding untouched.
void check_scores(const KeyCache& cache, int heads, const std::vector<int32_t>& seq,
                  const std::vector<int32_t>& visible, int64_t n_cols, bool rows_share_keys,
                  uint64_t seed, int exp_range, bool gpu_pack) {
  Stream stream;
  const cudaStream_t st = stream.get();
  const int dim = cache.dim;
  const int key_bytes = index_key_bytes(dim);
  const auto rows = static_cast<int64_t>(seq.size());
  std::mt19937_64 rng(seed);
  std::vector<float> q_raw;
  std::vector<uint8_t> q(static_cast<size_t>(rows * heads * key_bytes));
  std::vector<float> q_vals;
  for (int64_t i = 0; i < rows * heads; ++i) {
    const auto x = random_row(rng, dim, exp_range);
    q_raw.insert(q_raw.end(), x.begin(), x.end());
    const auto v = pack_row(x, q.data() + i * key_bytes);
    q_vals.insert(q_vals.end(), v.begin(), v.end());
  }
  std::vector<float> w =
      dense_test::random_normal(static_cast<size_t>(rows * heads), seed + 1,
                                1.0f / std::sqrt(static_cast<float>(dim * heads)));
  const int64_t stride = n_cols + 3;
  DeviceBuffer q_dev = upload(q, st, "q");
  const DeviceBuffer q_raw_dev = upload(q_raw, st, "q fp32");
  if (gpu_pack) {
    q_dev = poisoned<uint8_t>(q.size(), st);
    IndexQueryPackParams pp;
    pp.q = q_raw_dev.data();
    pp.out = q_dev.as<uint8_t>();
    pp.rows = rows;
    pp.heads = heads;
    pp.dim = dim;
    index_query_pack(pp, st);
  }
  const DeviceBuffer w_dev = upload(w, st), seq_dev = upload(seq, st),
                     vis_dev = upload(visible, st);
  DeviceBuffer out_dev = poisoned<float>(static_cast<size_t>(rows * stride), st);
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
  p.heads = heads;
  p.dim = dim;
  indexer_score(p, st);
  const auto got = download<float>(out_dev, static_cast<size_t>(rows * stride), st);
  if (gpu_pack) {
    EXPECT_EQ(download<uint8_t>(q_dev, q.size(), st), q) << "GPU-packed q";
  }

  std::vector<float> want(static_cast<size_t>(n_cols));
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& keys = cache.keys[static_cast<size_t>(seq[static_cast<size_t>(r)])];
    ASSERT_LE(visible[static_cast<size_t>(r)], static_cast<int64_t>(keys.size()) / dim);
    cpu::indexer_score<float>(q_vals.data() + r * heads * dim, w.data() + r * heads, keys.data(),
                              n_cols, visible[static_cast<size_t>(r)], heads, dim, want.data());
    for (int64_t t = 0; t < stride; ++t) {
      const uint32_t g = float_bits(got[static_cast<size_t>(r * stride + t)]);
      const uint32_t e = t < n_cols ? float_bits(want[static_cast<size_t>(t)]) : 0xFFFFFFFFu;
      if (g != e && bad++ < 8) {
        ADD_FAILURE() << "row " << r << " t " << t << ": got 0x" << std::hex << g << " want 0x" << e
                      << std::dec;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "mismatching scores of " << rows << " rows x " << n_cols;
}

struct Width {
  int heads;
  int dim;
};

TEST(IndexerGeneric, ScoresBitwiseAtSmallWidths) {
  DI_REQUIRE_GPU();
  for (const Width wd : {Width{8, 64}, Width{4, 96}, Width{16, 128}}) {
    for (int exp_range : {0, 6}) {
      SCOPED_TRACE(testing::Message() << wd.heads << " x " << wd.dim << " exp_range " << exp_range);
      Stream stream;
      const std::vector<int64_t> lens = {1, 40, 300, 7};
      const KeyCache cache(wd.dim, lens, 17 + static_cast<uint64_t>(wd.dim), exp_range,
                           stream.get());
      // Decode: one row per sequence, n_cols the longest context, the last row sees fewer keys.
      check_scores(cache, wd.heads, {0, 1, 2, 3}, {1, 40, 300, 5}, 300, false, 5, exp_range, false);
      // Prefill: causal rows of sequence 2 (visible 1 .. 20, then 290 .. 300), mixed with others.
      std::vector<int32_t> seq, vis;
      for (int32_t v = 1; v <= 20; ++v) {
        seq.push_back(2);
        vis.push_back(v);
      }
      for (int32_t v = 290; v <= 300; ++v) {
        seq.push_back(2);
        vis.push_back(v);
      }
      seq.push_back(1);
      vis.push_back(0);  // nothing visible: all -inf
      check_scores(cache, wd.heads, seq, vis, 300, true, 6, exp_range, false);
    }
  }
}

TEST(IndexerGeneric, GpuPackedQueriesScoreLikeTheCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const KeyCache cache(64, {50, 9}, 99, 1, stream.get());
  check_scores(cache, 8, {0, 1, 0}, {50, 9, 31}, 50, false, 7, 1, true);
}

// The query packer's cases: 32 x 128 and 8 x 64 heads, fp32 and bf16 storage; f(width, bf16).
template <typename F>
void for_each_pack_case(F&& f) {
  for (const Width wd : {Width{kIndexHeads, kIndexDim}, Width{8, 64}}) {
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(testing::Message() << wd.heads << " x " << wd.dim << (bf16 ? " bf16" : " fp32"));
      f(wd, bf16);
    }
  }
}

// index_query_pack's parameters for `rows` rows of wd.heads x wd.dim queries (no RoPE).
IndexQueryPackParams pack_params(const void* q, uint8_t* out, int64_t rows, const Width wd,
                                 bool bf16) {
  IndexQueryPackParams p;
  p.q = q;
  p.out = out;
  p.rows = rows;
  p.heads = wd.heads;
  p.dim = wd.dim;
  p.precision = bf16 ? ActPrecision::kBF16 : ActPrecision::kF32;
  return p;
}

// index_query_pack vs cpu::pack_index_key row by row, for fp32 and bf16 storage, including zero
// rows, huge and tiny magnitudes, and +-0 / exact grid values.
TEST(IndexerGeneric, QueryPackBytesMatchCpuPacker) {
  DI_REQUIRE_GPU();
  for_each_pack_case([](const Width wd, const bool bf16) {
    Stream stream;
    const cudaStream_t st = stream.get();
    const int64_t rows = 7;
    std::mt19937_64 rng(123 + static_cast<uint64_t>(wd.dim));
    std::vector<float> x = random_rows(rng, rows * wd.heads, wd.dim, 8);
    const size_t d = static_cast<size_t>(wd.dim);
    std::fill_n(x.begin(), d, 0.0f);  // head row 0: zeros (the amax floor)
    for (size_t i = 0; i < d; ++i) {
      x[d + i] *= 1e30f;       // head row 1: huge
      x[2 * d + i] *= 1e-40f;  // head row 2: tiny (subnormal inputs)
      x[3 * d + i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.5f;  // grid values
    }
    x[4 * d] = -0.0f;
    if (bf16) x = from_bf16(to_bf16(x));
    const DeviceBuffer x_dev = bf16 ? upload(to_bf16(x), st) : upload(x, st);
    const int key_bytes = index_key_bytes(wd.dim);
    const size_t out_bytes = static_cast<size_t>(rows * wd.heads * key_bytes);
    DeviceBuffer out_dev = poisoned<uint8_t>(out_bytes + 16, st);
    index_query_pack(pack_params(x_dev.data(), out_dev.as<uint8_t>(), rows, wd, bf16), st);
    const auto got = download<uint8_t>(out_dev, out_bytes + 16, st);

    std::vector<uint8_t> want(out_bytes);
    std::vector<float> back(d);
    for (int64_t i = 0; i < rows * wd.heads; ++i) {
      const std::span<const float> row(x.data() + static_cast<size_t>(i) * d, d);
      const std::span<uint8_t> e(want.data() + i * key_bytes, static_cast<size_t>(key_bytes));
      cpu::pack_index_key(row, e);
      // The packed bytes are the reference's fake-quant of the row.
      std::vector<float> sim(row.begin(), row.end());
      cpu::fp4_quant_ue8m0<float>(sim, 32);
      cpu::unpack_index_key(e, back);
      for (size_t j = 0; j < d; ++j)
        ASSERT_EQ(float_bits(back[j]), float_bits(sim[j])) << "head row " << i << " value " << j;
    }
    int64_t bad = 0;
    for (size_t i = 0; i < out_bytes; ++i) {
      if (got[i] != want[i] && bad++ < 8) {
        ADD_FAILURE() << "byte " << i << " (head row " << i / static_cast<size_t>(key_bytes)
                      << "): got " << int{got[i]} << " want " << int{want[i]};
      }
    }
    EXPECT_EQ(bad, 0);
    for (size_t i = out_bytes; i < out_bytes + 16; ++i)
      EXPECT_EQ(got[i], 0xFF) << "byte " << i << " past the output changed";
  });
}

// index_query_pack with the RoPE of the heads' tails (rope_dim > 0): bytes identical to
// apply_rope followed by the packing, for fp32 and bf16 storage, at positions up to 64K.
TEST(IndexerGeneric, QueryPackWithRopeIsApplyRopeThenPack) {
  DI_REQUIRE_GPU();
  for_each_pack_case([](const Width wd, const bool bf16) {
    Stream stream;
    const cudaStream_t st = stream.get();
    const std::vector<int64_t> positions = {0, 1, 2, 77, 4095, 40000, 65535};
    const auto rows = static_cast<int64_t>(positions.size());
    const int rope_dim = wd.dim / 2;
    const auto freqs = cpu::rope_frequencies<float>({rope_dim, 160000.0, 65536, 16.0, 32.0, 1.0});
    const size_t n = static_cast<size_t>(rows * wd.heads * wd.dim);
    std::mt19937_64 rng(321 + static_cast<uint64_t>(wd.dim));
    const std::vector<float> x = random_rows(rng, rows * wd.heads, wd.dim, 4);
    const auto up = [&] { return bf16 ? upload(to_bf16(x), st) : upload(x, st); };
    const DeviceBuffer x_fused = up();
    DeviceBuffer x_roped = up();
    const DeviceBuffer pos_dev = upload(positions, st), freqs_dev = upload(freqs, st);
    const ActPrecision prec = bf16 ? ActPrecision::kBF16 : ActPrecision::kF32;
    const size_t out_bytes = static_cast<size_t>(rows * wd.heads * index_key_bytes(wd.dim));
    DeviceBuffer fused = poisoned<uint8_t>(out_bytes, st), sep = poisoned<uint8_t>(out_bytes, st);
    IndexQueryPackParams p = pack_params(x_fused.data(), fused.as<uint8_t>(), rows, wd, bf16);
    p.positions = pos_dev.as<int64_t>();
    p.rope_freqs = freqs_dev.as<float>();
    p.rope_dim = rope_dim;
    index_query_pack(p, st);

    dense_test::rope_rows(x_roped.data(), pos_dev.as<int64_t>(), freqs_dev.as<float>(), rows,
                          wd.heads, wd.dim, rope_dim, prec, st);
    IndexQueryPackParams q = p;
    q.q = x_roped.data();
    q.out = sep.as<uint8_t>();
    q.rope_dim = 0;
    index_query_pack(q, st);
    const auto got = download<uint8_t>(fused, out_bytes, st);
    const auto want = download<uint8_t>(sep, out_bytes, st);
    EXPECT_EQ(got, want);
    // The input itself is left as it was: the fused pack does not write q.
    const size_t esz = bf16 ? 2 : 4;
    EXPECT_EQ(download<uint8_t>(x_fused, n * esz, st), download<uint8_t>(up(), n * esz, st));
  });
}

TEST(IndexerGeneric, LaunchersRejectBadWidths) {
  alignas(16) static uint8_t bytes[256] = {};
  alignas(16) static float floats[64] = {};
  static const int32_t ints[4] = {0, 0, 0, 0};
  IndexerScoreParams p;
  p.q = bytes;
  p.weights = floats;
  p.row_seq = ints;
  p.row_visible = ints;
  p.scores = floats;
  p.rows = 1;
  p.n_cols = 1;
  p.score_stride = 1;
  p.keys.pool = bytes;
  p.keys.pages = ints;
  p.keys.pages_stride = 1;
  p.keys.entries_per_page = 1;
  p.keys.page_bytes = 64;
  p.keys.entry_bytes = index_key_bytes(64);
  p.heads = 0;
  p.dim = 64;
  EXPECT_THROW(indexer_score(p, nullptr), Error);
  p.heads = 8;
  p.dim = 48;  // not a multiple of 32
  EXPECT_THROW(indexer_score(p, nullptr), Error);
  p.dim = 64;
  p.heads = 200;  // the unpacked q row does not fit the shared memory of the generic kernel
  EXPECT_THROW(indexer_score(p, nullptr), Error);
  p.heads = 8;
  p.keys.entry_bytes = kIndexKeyBytes;  // a 128-wide key table for 64-wide queries
  EXPECT_THROW(indexer_score(p, nullptr), Error);

  IndexQueryPackParams q;
  q.q = floats;
  q.out = bytes;
  q.rows = 1;
  q.heads = 8;
  q.dim = 48;
  EXPECT_THROW(index_query_pack(q, nullptr), Error);
  q.dim = 64;
  q.heads = 0;
  EXPECT_THROW(index_query_pack(q, nullptr), Error);
  q.heads = 8;
  q.rope_dim = 31;  // odd
  EXPECT_THROW(index_query_pack(q, nullptr), Error);
  q.rope_dim = 32;  // no positions / frequencies
  EXPECT_THROW(index_query_pack(q, nullptr), Error);
  q.rope_dim = 0;
  q.q = nullptr;
  EXPECT_THROW(index_query_pack(q, nullptr), Error);
  q.rows = 0;  // nothing to do: returns before any launch
  EXPECT_NO_THROW(index_query_pack(q, nullptr));
}

}  // namespace
}  // namespace di::indexer_generic_test
