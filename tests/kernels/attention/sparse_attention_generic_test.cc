// The dimension-generic CSA2 sparse attention (heads x head_dim other than 64 x 512, the small
// fixture models) against the CPU reference: cpu::sparse_attention in float64 on the decoded
// cache entries, then the inverse RoPE of the output tail. Mainly the tiny fixture's dims (4 heads
// x 128, rope 64, window 8, top-k width 8 or 24), plus other shapes (odd head counts, 1024-wide
// heads, a 2048-wide top-k). Window entries from a paged SWA ring (shuffled page ids, several
// blocks' rings in one table) and from the chunk's own entries, compressed entries from a paged
// table through top-k rows in shuffled order with -1 and >= comp_entries slots, sinks, rows of
// different sequences and positions, fp32 and bf16 storage, poisoned outputs; the bitwise batch
// invariance of a row; the launcher's checks of the new fields.
//
// The entries are built by this test's own packer (the formats of kernels/params/kv_cache.h at
// width head_dim, from the codecs of common/fp8.h and common/fp4.h); what the kernel must
// reproduce are the decoded values, which the reference uses.
//
// Tolerances (normwise per row and head, ||gpu - ref|| / ||ref||): fp32 precision 1e-4 (the
// kernel computes in fp32 on exact entry values: ~1e-6 in practice); bf16 precision 1e-2 (output
// stored in bf16; q is the bf16-rounded input for both sides).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/error.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sparse_attn.h"
#include "kernels/cuda/attention/sparse_attention.cuh"
#include "tests_support/error_of.h"

namespace di::sparse_attention_generic_test {
namespace {

using dense_test::download;
using dense_test::poisoned;
using dense_test::random_normal;
using dense_test::upload;

constexpr int kSwaBlocks = 3;  // rings of 3 blocks share the SWA table; the layer reads ring 1
constexpr int kRing = 1;
constexpr int64_t kPageBytes = 4096;

// SWA entry of width dim: e4m3 codes of x / s with s = 2^ceil(log2(max(amax, 1e-4) / 448)) per 32
// (UE8M0 bytes after the codes); returns the decoded values.
std::vector<float> pack_swa(std::span<const float> x, std::span<uint8_t> out) {
  const int dim = static_cast<int>(x.size());
  std::vector<float> back(x.size());
  for (int b = 0; b < dim / kSwaScaleBlock; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < kSwaScaleBlock; ++i)
      amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * kSwaScaleBlock + i)]));
    const uint8_t byte = e8m0_pow2ceil(std::max(amax, 1e-4f) * (1.0f / 448.0f));
    const float s = e8m0_to_float(byte);
    out[static_cast<size_t>(dim + b)] = byte;
    for (int i = 0; i < kSwaScaleBlock; ++i) {
      const auto d = static_cast<size_t>(b * kSwaScaleBlock + i);
      out[d] = e4m3_from_float(std::clamp(x[d] / s, -448.0f, 448.0f));
      back[d] = e4m3_to_float(out[d]) * s;
    }
  }
  return back;
}

// Compressed entry of width dim: e2m1 pairs of x / s with the e4m3 scale s = e4m3(max(amax,
// 6 * 2^-9) / 6) per 16 (scale bytes after the dim / 2 packed bytes); returns the decoded values.
std::vector<float> pack_comp(std::span<const float> x, std::span<uint8_t> out) {
  const int dim = static_cast<int>(x.size());
  std::vector<float> back(x.size());
  for (int b = 0; b < dim / kCompScaleBlock; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < kCompScaleBlock; ++i)
      amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * kCompScaleBlock + i)]));
    const uint8_t code = e4m3_from_float(std::max(amax, 6.0f * 0x1p-9f) / 6.0f);
    const float s = e4m3_to_float(code);
    out[static_cast<size_t>(dim / 2 + b)] = code;
    for (int i = 0; i < kCompScaleBlock; i += 2) {
      const auto d = static_cast<size_t>(b * kCompScaleBlock + i);
      const uint8_t lo = e2m1_from_float(std::clamp(x[d] / s, -6.0f, 6.0f));
      const uint8_t hi = e2m1_from_float(std::clamp(x[d + 1] / s, -6.0f, 6.0f));
      out[d / 2] = pack_e2m1(lo, hi);
      back[d] = e2m1_to_float(lo) * s;
      back[d + 1] = e2m1_to_float(hi) * s;
    }
  }
  return back;
}

// One sequence of the batch: its query position, where its chunk starts, its compressed length.
struct SeqSpec {
  int64_t pos;
  int64_t chunk_len;  // positions pos - chunk_len + 1 .. pos come from chunk_kv (0 = all ring)
  int64_t comp_len;   // compressed entries visible
};

// A paged table of packed random entries; keeps the decoded values per (seq, entry).
struct PagedStore {
  int dim = 0;
  int entry_bytes = 0;
  int per_page = 0;
  int pages_per_seq = 0;
  std::vector<uint8_t> pool;
  std::vector<int32_t> pages;              // [seqs, pages_per_seq]
  std::vector<std::vector<float>> values;  // [seq][entry * dim + d]

  PagedStore(int d, int eb, int64_t entries, int seqs, std::mt19937_64& rng)
      : dim(d), entry_bytes(eb) {
    per_page = static_cast<int>(kPageBytes / eb);
    pages_per_seq = static_cast<int>(std::max<int64_t>((entries + per_page - 1) / per_page, 1));
    const int total = pages_per_seq * seqs + 3;  // spare pages stay poisoned
    pool.assign(static_cast<size_t>(total) * kPageBytes, 0xFF);
    std::vector<int32_t> ids(static_cast<size_t>(total));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    pages.assign(ids.begin(), ids.begin() + pages_per_seq * seqs);
    values.resize(static_cast<size_t>(seqs));
  }
  std::span<uint8_t> entry(int seq, int64_t e) {
    const int32_t page = pages[static_cast<size_t>(seq * pages_per_seq + e / per_page)];
    return {pool.data() + page * kPageBytes + (e % per_page) * entry_bytes,
            static_cast<size_t>(entry_bytes)};
  }
  // Fills entries [0, n) of seq with random values (swa: SWA format, else compressed).
  void fill(int seq, int64_t n, bool swa, std::mt19937_64& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto& vals = values[static_cast<size_t>(seq)];
    vals.resize(static_cast<size_t>(n * dim));
    std::vector<float> x(static_cast<size_t>(dim));
    for (int64_t e = 0; e < n; ++e) {
      for (auto& v : x)
        v = nd(rng);
      const auto back = swa ? pack_swa(x, entry(seq, e)) : pack_comp(x, entry(seq, e));
      std::copy(back.begin(), back.end(), vals.begin() + e * dim);
    }
  }
};

struct Case {
  int heads = 4;
  int dim = 128;
  int rope_dim = 64;
  int window = 8;
  int topk_width = 8;
  std::vector<SeqSpec> seqs;
  std::vector<int> row_seq;      // rows -> sequence
  std::vector<int64_t> row_pos;  // per-row positions (empty: the sequence's pos)
  bool null_chunk_kv = false;    // every window position must then be in the ring
  ActPrecision precision = ActPrecision::kF32;
  uint64_t seed = 1;
  int single_row = -1;  // >= 0: also run that row alone (batch invariance)
};

struct Result {
  int dim = 0;
  std::vector<float> gpu;  // [rows, heads, dim] as fp32
  std::vector<double> ref;
  std::vector<uint8_t> gpu_bytes;     // the raw output
  std::vector<uint8_t> single_bytes;  // the single_row launch's raw output
};

Result run_case(const Case& c) {
  std::mt19937_64 rng(c.seed);
  const int H = c.heads, D = c.dim, W = c.window, K = c.topk_width;
  const int nseq = static_cast<int>(c.seqs.size());
  const int rows = static_cast<int>(c.row_seq.size());
  const int swa_bytes = swa_entry_bytes(D), comp_bytes = comp_entry_bytes(D);
  int64_t max_comp = 1;
  for (const auto& s : c.seqs)
    max_comp = std::max(max_comp, s.comp_len);

  PagedStore swa(D, swa_bytes, kSwaBlocks * W, nseq, rng);
  PagedStore comp(D, comp_bytes, max_comp, nseq, rng);
  std::vector<uint8_t> chunk_kv;
  std::vector<int64_t> chunk_row0(static_cast<size_t>(nseq)),
      chunk_start(static_cast<size_t>(nseq));
  std::vector<std::vector<float>> chunk_vals(static_cast<size_t>(nseq));
  for (int s = 0; s < nseq; ++s) {
    const SeqSpec& sp = c.seqs[static_cast<size_t>(s)];
    // Ring slots of every block (the other rings must not be read: they hold other values).
    swa.fill(s, kSwaBlocks * W, true, rng);
    comp.fill(s, sp.comp_len, false, rng);
    chunk_start[static_cast<size_t>(s)] = sp.pos - sp.chunk_len + 1;
    chunk_row0[static_cast<size_t>(s)] = static_cast<int64_t>(chunk_kv.size()) / swa_bytes;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < sp.chunk_len; ++i) {
      std::vector<float> x(static_cast<size_t>(D));
      for (auto& v : x)
        v = nd(rng);
      std::vector<uint8_t> e(static_cast<size_t>(swa_bytes));
      const auto back = pack_swa(x, e);
      chunk_kv.insert(chunk_kv.end(), e.begin(), e.end());
      chunk_vals[static_cast<size_t>(s)].insert(chunk_vals[static_cast<size_t>(s)].end(),
                                                back.begin(), back.end());
    }
  }
  if (chunk_kv.empty()) chunk_kv.resize(static_cast<size_t>(swa_bytes));

  auto q = random_normal(static_cast<size_t>(rows) * H * D, c.seed + 7);
  if (c.precision == ActPrecision::kBF16) {
    for (auto& x : q)
      x = bf16_to_float(bf16_from_float(x));
  }
  const std::vector<float> sink = random_normal(static_cast<size_t>(H), c.seed + 9, 2.0f);
  std::vector<int32_t> topk(static_cast<size_t>(rows) * std::max(K, 1), -1);
  std::vector<int32_t> seq_of_row(static_cast<size_t>(rows));
  std::vector<int64_t> pos_of_row(static_cast<size_t>(rows)), cs_of_row(static_cast<size_t>(rows)),
      r0_of_row(static_cast<size_t>(rows));
  const auto freqs = cpu::rope_frequencies<float>({c.rope_dim, 160000.0, 65536, 16.0, 32.0, 1.0});
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));

  Result res;
  res.dim = D;
  res.ref.resize(static_cast<size_t>(rows) * H * D);
  for (int r = 0; r < rows; ++r) {
    const int s = c.row_seq[static_cast<size_t>(r)];
    const SeqSpec& sp = c.seqs[static_cast<size_t>(s)];
    const int64_t cs = chunk_start[static_cast<size_t>(s)];
    seq_of_row[static_cast<size_t>(r)] = s;
    const int64_t pos = c.row_pos.empty() ? sp.pos : c.row_pos[static_cast<size_t>(r)];
    pos_of_row[static_cast<size_t>(r)] = pos;
    cs_of_row[static_cast<size_t>(r)] = cs;
    r0_of_row[static_cast<size_t>(r)] = chunk_row0[static_cast<size_t>(s)];
    std::vector<double> entries;
    auto add = [&](const float* v) { entries.insert(entries.end(), v, v + D); };
    for (int64_t t = std::max<int64_t>(0, pos - W + 1); t <= pos; ++t) {
      if (t < cs) {
        add(swa.values[static_cast<size_t>(s)].data() + (kRing * W + t % W) * D);
      } else {
        add(chunk_vals[static_cast<size_t>(s)].data() + (t - cs) * D);
      }
    }
    if (K > 0) {
      // A random visible subset, the remaining slots -1 or >= comp_entries (both masked), the
      // whole row shuffled.
      std::vector<int32_t> all(static_cast<size_t>(sp.comp_len));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      const int64_t n = std::min<int64_t>(K - K / 4, sp.comp_len);
      std::vector<int32_t> slots(static_cast<size_t>(K));
      for (int64_t i = 0; i < K; ++i) {
        slots[static_cast<size_t>(i)] =
            i < n ? all[static_cast<size_t>(i)]
                  : (i % 2 == 0 ? -1 : static_cast<int32_t>(max_comp + i));
      }
      std::shuffle(slots.begin(), slots.end(), rng);
      for (int64_t i = 0; i < K; ++i) {
        const int32_t idx = slots[static_cast<size_t>(i)];
        topk[static_cast<size_t>(r * K + i)] = idx;
        if (idx >= 0 && idx < max_comp) add(comp.values[static_cast<size_t>(s)].data() + idx * D);
      }
    }
    const int64_t n_ent = static_cast<int64_t>(entries.size()) / D;
    std::vector<int32_t> idx(static_cast<size_t>(n_ent));
    std::iota(idx.begin(), idx.end(), 0);
    std::vector<double> qd(q.begin() + static_cast<int64_t>(r) * H * D,
                           q.begin() + static_cast<int64_t>(r + 1) * H * D);
    std::vector<double> sd(sink.begin(), sink.end());
    double* o = res.ref.data() + static_cast<int64_t>(r) * H * D;
    cpu::sparse_attention<double>(qd.data(), 1, H, D, entries.data(), n_ent, sd.data(), idx.data(),
                                  n_ent, scale, o);
    for (int h = 0; h < H; ++h) {
      double* x = o + h * D + (D - c.rope_dim);
      for (int i = 0; i < c.rope_dim / 2; ++i) {
        const float angle = static_cast<float>(pos) * freqs[static_cast<size_t>(i)];
        const double cs_a = std::cos(static_cast<double>(angle));
        const double sn = -std::sin(static_cast<double>(angle));
        const double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cs_a - b * sn;
        x[2 * i + 1] = a * sn + b * cs_a;
      }
    }
  }

  Stream stream;
  const cudaStream_t st = stream.get();
  DeviceBuffer d_swa = upload(swa.pool, st), d_comp = upload(comp.pool, st);
  DeviceBuffer d_swa_pages = upload(swa.pages, st), d_comp_pages = upload(comp.pages, st);
  DeviceBuffer d_chunk = upload(chunk_kv, st);
  DeviceBuffer d_q =
      c.precision == ActPrecision::kF32 ? upload(q, st) : upload(dense_test::to_bf16(q), st);
  const size_t esz = c.precision == ActPrecision::kF32 ? 4 : 2;
  const size_t out_bytes = static_cast<size_t>(rows) * H * D * esz;
  DeviceBuffer d_out = poisoned<uint8_t>(out_bytes, st);
  DeviceBuffer d_seq = upload(seq_of_row, st), d_pos = upload(pos_of_row, st);
  DeviceBuffer d_cs = upload(cs_of_row, st), d_r0 = upload(r0_of_row, st);
  DeviceBuffer d_topk = upload(topk, st), d_sink = upload(sink, st), d_freqs = upload(freqs, st);

  SparseAttnParams p;
  p.q = d_q.data();
  p.out = d_out.data();
  p.rows = rows;
  p.precision = c.precision;
  p.heads = H;
  p.head_dim = D;
  p.seq = d_seq.as<int32_t>();
  p.pos = d_pos.as<int64_t>();
  p.chunk_start = d_cs.as<int64_t>();
  p.chunk_row0 = d_r0.as<int64_t>();
  p.swa = {d_swa.as<uint8_t>(), kPageBytes,   d_swa_pages.as<int32_t>(),
           swa.pages_per_seq,   swa.per_page, swa_bytes};
  p.ring_block = kRing;
  p.window = W;
  p.chunk_kv = c.null_chunk_kv ? nullptr : d_chunk.as<uint8_t>();
  p.comp = {d_comp.as<uint8_t>(), kPageBytes,    d_comp_pages.as<int32_t>(),
            comp.pages_per_seq,   comp.per_page, comp_bytes};
  p.topk = d_topk.as<int32_t>();
  p.topk_width = K;
  p.comp_entries = max_comp;
  p.sink = d_sink.as<float>();
  p.scale = static_cast<float>(scale);
  p.rope_freqs = d_freqs.as<float>();
  p.rope_dim = c.rope_dim;
  sparse_attention(p, st);
  DI_CUDA_CHECK(cudaStreamSynchronize(st));
  res.gpu_bytes = download<uint8_t>(d_out, out_bytes, st);
  const size_t n_out = static_cast<size_t>(rows) * H * D;
  if (c.precision == ActPrecision::kF32) {
    res.gpu.resize(n_out);
    std::memcpy(res.gpu.data(), res.gpu_bytes.data(), out_bytes);
  } else {
    std::vector<uint16_t> bits(n_out);
    std::memcpy(bits.data(), res.gpu_bytes.data(), out_bytes);
    res.gpu = dense_test::from_bf16(bits);
  }
  if (c.single_row >= 0) {
    // The same row as a batch of one: every per-row array offset to it, a fresh output.
    const int64_t r = c.single_row;
    const size_t row_bytes = static_cast<size_t>(H) * D * esz;
    DeviceBuffer d_one = poisoned<uint8_t>(row_bytes, st);
    SparseAttnParams one = p;
    one.rows = 1;
    one.q = static_cast<const uint8_t*>(d_q.data()) + r * static_cast<int64_t>(row_bytes);
    one.out = d_one.data();
    one.seq += r;
    one.pos += r;
    one.chunk_start += r;
    one.chunk_row0 += r;
    one.topk += r * K;
    sparse_attention(one, st);
    res.single_bytes = download<uint8_t>(d_one, row_bytes, st);
  }
  return res;
}

void expect_close(const Result& r, double tol, const std::string& what) {
  const auto D = static_cast<size_t>(r.dim);
  const size_t rh = r.ref.size() / D;
  double worst = 0.0;
  for (size_t i = 0; i < rh; ++i) {
    double num = 0.0, den = 0.0;
    for (size_t d = 0; d < D; ++d) {
      const double g = r.gpu[i * D + d];
      ASSERT_TRUE(std::isfinite(g)) << what << ": row*head " << i << " dim " << d;
      const double e = g - r.ref[i * D + d];
      num += e * e;
      den += r.ref[i * D + d] * r.ref[i * D + d];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
  }
  EXPECT_LE(worst, tol) << what;
  std::printf("%s: worst normwise relative error %.3g\n", what.c_str(), worst);
}

// Decode rows at the tiny fixture's dims: a partial window with 2 compressed entries, long
// contexts (full window, many compressed), the last window positions from chunk_kv, no
// compressed entries yet, position 0.
Case tiny_decode(ActPrecision prec, int topk_width, uint64_t seed) {
  Case c;
  c.precision = prec;
  c.topk_width = topk_width;
  c.seed = seed;
  c.seqs = {{5, 0, 2}, {4000, 0, 2000}, {77, 3, 38}, {6, 0, 0}, {20000, 1, 10000}, {0, 1, 1}};
  c.row_seq = {0, 1, 2, 3, 4, 5};
  return c;
}

TEST(SparseAttentionGenericGpu, TinyDecodeFp32MatchesCpu) {
  DI_REQUIRE_GPU();
  expect_close(run_case(tiny_decode(ActPrecision::kF32, 8, 11)), 1e-4, "tiny decode fp32, k 8");
  expect_close(run_case(tiny_decode(ActPrecision::kF32, 24, 12)), 1e-4, "tiny decode fp32, k 24");
}

TEST(SparseAttentionGenericGpu, TinyDecodeBf16MatchesCpu) {
  DI_REQUIRE_GPU();
  expect_close(run_case(tiny_decode(ActPrecision::kBF16, 8, 13)), 1e-2, "tiny decode bf16, k 8");
  expect_close(run_case(tiny_decode(ActPrecision::kBF16, 24, 14)), 1e-2, "tiny decode bf16, k 24");
}

TEST(SparseAttentionGenericGpu, TinyPrefillRowsOfOneSequence) {
  DI_REQUIRE_GPU();
  // One sequence, a 20-row chunk at positions 40..59: all rows share one page-table row and one
  // chunk_kv slice; the first rows' windows reach back into the ring.
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    Case c;
    c.precision = prec;
    c.topk_width = 24;
    c.seed = 23;
    c.seqs = {{59, 20, 30}};
    for (int64_t i = 0; i < 20; ++i) {
      c.row_seq.push_back(0);
      c.row_pos.push_back(40 + i);
    }
    expect_close(run_case(c), prec == ActPrecision::kF32 ? 1e-4 : 1e-2,
                 prec == ActPrecision::kF32 ? "tiny prefill fp32" : "tiny prefill bf16");
  }
}

TEST(SparseAttentionGenericGpu, TinyWindowOnlyAndRingOnly) {
  DI_REQUIRE_GPU();
  Case c = tiny_decode(ActPrecision::kF32, 0, 31);
  expect_close(run_case(c), 1e-4, "tiny window only");
  // chunk_kv null: every window position from the ring.
  Case r = tiny_decode(ActPrecision::kF32, 8, 32);
  r.seqs = {{5, 0, 2}, {4000, 0, 2000}, {77, 0, 38}};
  r.row_seq = {0, 1, 2};
  r.null_chunk_kv = true;
  expect_close(run_case(r), 1e-4, "tiny ring only, null chunk_kv");
}

TEST(SparseAttentionGenericGpu, OtherShapesMatchCpu) {
  DI_REQUIRE_GPU();
  struct Shape {
    int heads, dim, rope_dim, window, topk_width;
  };
  // Odd head count and a short rope; the widest heads; 64-wide heads with the widest top-k; no
  // rope; and 64 heads of 256 (not the tensor-core shape).
  for (const Shape s :
       {Shape{3, 64, 16, 5, 20}, Shape{2, 1024, 64, 128, 300}, Shape{1, 32, 32, 16, 2048},
        Shape{5, 96, 0, 8, 8}, Shape{64, 256, 64, 8, 24}}) {
    Case c = tiny_decode(ActPrecision::kF32, s.topk_width, 41 + s.dim);
    c.heads = s.heads;
    c.dim = s.dim;
    c.rope_dim = s.rope_dim;
    c.window = s.window;
    expect_close(run_case(c), 1e-4,
                 std::to_string(s.heads) + " x " + std::to_string(s.dim) + ", rope " +
                     std::to_string(s.rope_dim) + ", window " + std::to_string(s.window) +
                     ", top-k " + std::to_string(s.topk_width));
  }
}

TEST(SparseAttentionGenericGpu, RowIsBatchInvariant) {
  DI_REQUIRE_GPU();
  // Each row of the decode batch alone: bitwise the same output as inside the batch of six.
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    for (int r = 0; r < 6; ++r) {
      Case c = tiny_decode(prec, 24, 61);
      c.single_row = r;
      const Result res = run_case(c);
      const size_t row_bytes = res.single_bytes.size();
      ASSERT_EQ(
          std::memcmp(res.single_bytes.data(), res.gpu_bytes.data() + r * row_bytes, row_bytes), 0)
          << "row " << r << (prec == ActPrecision::kF32 ? " fp32" : " bf16");
    }
  }
}

using test::error_of;

// Launcher checks of the dimension fields (no device needed: they run before any CUDA call).
TEST(SparseAttentionGenericGpu, BadDimsAreRejected) {
  alignas(16) static const int32_t pages[4] = {0, 1, 2, 3};
  auto* fake = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
  SparseAttnParams p;
  p.rows = 1;
  p.q = fake;
  p.out = fake;
  p.seq = pages;
  p.pos = reinterpret_cast<const int64_t*>(fake);
  p.chunk_start = p.pos;
  p.chunk_row0 = p.pos;
  p.sink = reinterpret_cast<const float*>(fake);
  p.rope_freqs = p.sink;
  p.scale = 0.088f;
  p.heads = 4;
  p.head_dim = 128;
  p.window = 8;
  p.swa = {fake, 4096, pages, 4, 31, swa_entry_bytes(128)};  // 132 B entries
  const auto err = [&] { return error_of([&] { sparse_attention(p, nullptr); }); };

  p.heads = 0;
  EXPECT_NE(err().find("heads 0 must be in [1, 128]"), std::string::npos);
  p.heads = 129;
  EXPECT_NE(err().find("heads 129"), std::string::npos);
  p.heads = 4;
  p.head_dim = 100;  // not a multiple of the 32-wide SWA scale block
  EXPECT_NE(err().find("head_dim 100 must be a multiple of 32"), std::string::npos);
  p.head_dim = 2048;
  EXPECT_NE(err().find("head_dim 2048"), std::string::npos);
  p.head_dim = 0;
  EXPECT_NE(err().find("head_dim 0"), std::string::npos);
  p.head_dim = 128;
  // A table of the 512-wide format for 128-wide heads.
  p.swa.entry_bytes = kSwaEntryBytes;
  EXPECT_NE(err().find("entry_bytes 528 (expected 132)"), std::string::npos);
  p.swa.entry_bytes = swa_entry_bytes(128);
  p.topk_width = 8;
  p.topk = pages;
  p.comp_entries = 16;
  p.comp = {fake, 4096, pages, 4, 16, kCompEntryBytes};
  EXPECT_NE(err().find("entry_bytes 288 (expected 72)"), std::string::npos);
  p.comp.entry_bytes = comp_entry_bytes(128);
  p.topk_width = 4096;  // above the generic kernel's 2048
  EXPECT_NE(err().find("topk_width 4096 must be in [0, 2048]"), std::string::npos);
  p.topk_width = 8;
  p.rope_dim = 63;
  EXPECT_NE(err().find("rope_dim 63 must be even"), std::string::npos);
  p.rope_dim = 130;
  EXPECT_NE(err().find("rope_dim 130"), std::string::npos);
  p.rope_dim = 64;
  p.q = fake + 2;  // fp32 elements need 4-byte alignment
  EXPECT_NE(err().find("q and out must be aligned"), std::string::npos);
  p.q = fake;
  p.window = 129;
  EXPECT_NE(err().find("window 129"), std::string::npos);
}

}  // namespace
}  // namespace di::sparse_attention_generic_test
