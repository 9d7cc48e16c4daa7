// CSA2 sparse attention on the GPU against the CPU reference (cpu::sparse_attention in float64
// on the unpacked cache entries, then the inverse RoPE of the output tail) at V4.1 dimensions:
// 64 heads x 512, window 128 from a paged SWA ring (shuffled page ids, several blocks' rings in
// one table) plus the chunk's own entries, up to 512 top-k compressed FP4 entries from a paged
// table, sinks, rows of different sequences and positions. Poisoned outputs.
//
// Tolerances (normwise per row and head, ||gpu - ref|| / ||ref||): fp32 precision 1e-4 (q and P
// enter the tensor cores as hi + lo bf16 pairs, ~2^-17 relative each; the KV values are exact in
// bf16); bf16 precision 1e-2 (P in bf16, output stored in bf16; q is the bf16-rounded input for
// both sides).

#include "kernels/cuda/attention/sparse_attention.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/error.h"
#include "kernels/cpu/kv_pack.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sparse_attn.h"
#include "tests_support/error_of.h"

namespace di {
namespace {

using dense_test::download;
using dense_test::poisoned;
using dense_test::random_normal;
using dense_test::upload;

constexpr int kH = kAttnHeads;
constexpr int kD = kKvDim;
constexpr int kWindow = 128;
constexpr int kSwaBlocks = 3;  // rings of 3 blocks share the SWA table; the layer reads ring 1
constexpr int kRing = 1;
constexpr int64_t kPageBytes = 4096;

// One sequence of the batch: its query position, where its chunk starts, its compressed length.
struct SeqSpec {
  int64_t pos;
  int64_t chunk_len;  // positions pos - chunk_len + 1 .. pos come from chunk_kv (0 = all ring)
  int64_t comp_len;   // compressed entries visible
};

// A paged table filled with packed random entries; keeps the unpacked values per (seq, entry).
struct PagedStore {
  int entry_bytes = 0;
  int per_page = 0;
  int pages_per_seq = 0;
  std::vector<uint8_t> pool;
  std::vector<int32_t> pages;              // [seqs, pages_per_seq]
  std::vector<std::vector<float>> values;  // [seq][entry * 512 + d]

  PagedStore(int eb, int64_t entries, int seqs, std::mt19937_64& rng) : entry_bytes(eb) {
    per_page = static_cast<int>(kPageBytes / eb);
    pages_per_seq = static_cast<int>((entries + per_page - 1) / per_page);
    const int total = pages_per_seq * seqs + 3;  // spare pages stay poisoned
    pool.assign(static_cast<size_t>(total) * kPageBytes, 0xFF);
    std::vector<int32_t> ids(static_cast<size_t>(total));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    pages.assign(ids.begin(), ids.begin() + pages_per_seq * seqs);
    values.resize(static_cast<size_t>(seqs));
  }
  uint8_t* entry(int seq, int64_t e) {
    const int32_t page = pages[static_cast<size_t>(seq * pages_per_seq + e / per_page)];
    return pool.data() + page * kPageBytes + (e % per_page) * entry_bytes;
  }
};

std::vector<float> random_entry(std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(kD);
  for (auto& x : v)
    x = d(rng);
  return v;
}

struct Case {
  std::vector<SeqSpec> seqs;
  std::vector<int> row_seq;  // rows -> sequence (decode: one row per sequence)
  int topk_width = 512;
  ActPrecision precision = ActPrecision::kF32;
  uint64_t seed = 1;
  int single_row = -1;   // >= 0: also run that row alone (batch invariance)
  int window = kWindow;  // sliding window (<= 128); the rings hold kWindow slots each
  // Per-row positions (prefill rows of one sequence); empty: a row is at its sequence's pos.
  std::vector<int64_t> row_pos;
  bool fp32_reference = false;  // SparseAttnParams::fp32_reference (the generic kernel)
  // Also: q taken as the heads before RoPE, attended with q_rope (fused) and after apply_rope
  // (separate launch), both outputs' bytes kept.
  bool q_rope_check = false;
  int head_split = 0;  // SparseAttnParams::head_split (0: chosen by the grid)
  AttnTensorKernel tensor_kernel = AttnTensorKernel::kAuto;  // SparseAttnParams::tensor_kernel
  // Leading top-k slots left at -1 before the selected indices (masked entries and whole masked
  // tiles / chunks ahead of valid ones).
  int topk_offset = 0;
  // > 0: a DSpark draft block (SparseAttnParams::block_rows): every row of a sequence attends to
  // the ring before its chunk and to the chunk's first block_rows entries (topk_width 0).
  int block_rows = 0;
};

struct Result {
  std::vector<float> gpu;  // [rows, 64, 512] as fp32
  std::vector<double> ref;
  std::vector<float> single;             // the single_row launch, as fp32
  std::vector<uint8_t> fused, separate;  // q_rope_check: the two outputs' bytes
};

// Runs one case on the GPU and the CPU reference; a row is at its sequence's position unless
// Case::row_pos gives one per row.
Result run_case(const Case& c) {
  std::mt19937_64 rng(c.seed);
  const int nseq = static_cast<int>(c.seqs.size());
  const int rows = static_cast<int>(c.row_seq.size());
  int64_t max_comp = 1;
  for (const auto& s : c.seqs)
    max_comp = std::max(max_comp, s.comp_len);

  PagedStore swa(kSwaEntryBytes, kSwaBlocks * kWindow, nseq, rng);
  PagedStore comp(kCompEntryBytes, max_comp, nseq, rng);
  std::vector<uint8_t> chunk_kv;
  std::vector<int64_t> chunk_row0(static_cast<size_t>(nseq)),
      chunk_start(static_cast<size_t>(nseq));
  std::vector<std::vector<float>> chunk_vals(static_cast<size_t>(nseq));
  for (int s = 0; s < nseq; ++s) {
    const SeqSpec& sp = c.seqs[static_cast<size_t>(s)];
    // Ring slots of every block (the other rings must not be read: they hold other values).
    swa.values[static_cast<size_t>(s)].resize(static_cast<size_t>(kSwaBlocks * kWindow * kD));
    for (int64_t e = 0; e < kSwaBlocks * kWindow; ++e) {
      const auto v = random_entry(rng);
      cpu::pack_swa_entry(v, std::span<uint8_t>(swa.entry(s, e), kSwaEntryBytes));
      cpu::unpack_swa_entry(
          std::span<const uint8_t>(swa.entry(s, e), kSwaEntryBytes),
          std::span<float>(swa.values[static_cast<size_t>(s)].data() + e * kD, kD));
    }
    comp.values[static_cast<size_t>(s)].resize(static_cast<size_t>(sp.comp_len * kD));
    for (int64_t e = 0; e < sp.comp_len; ++e) {
      const auto v = random_entry(rng);
      cpu::pack_comp_entry(v, std::span<uint8_t>(comp.entry(s, e), kCompEntryBytes));
      cpu::unpack_comp_entry(
          std::span<const uint8_t>(comp.entry(s, e), kCompEntryBytes),
          std::span<float>(comp.values[static_cast<size_t>(s)].data() + e * kD, kD));
    }
    chunk_start[static_cast<size_t>(s)] = sp.pos - sp.chunk_len + 1;
    chunk_row0[static_cast<size_t>(s)] = static_cast<int64_t>(chunk_kv.size()) / kSwaEntryBytes;
    for (int64_t i = 0; i < sp.chunk_len; ++i) {
      const auto v = random_entry(rng);
      std::vector<uint8_t> e(kSwaEntryBytes);
      std::vector<float> back(kD);
      cpu::pack_swa_entry(v, e);
      cpu::unpack_swa_entry(e, back);
      chunk_kv.insert(chunk_kv.end(), e.begin(), e.end());
      chunk_vals[static_cast<size_t>(s)].insert(chunk_vals[static_cast<size_t>(s)].end(),
                                                back.begin(), back.end());
    }
  }
  if (chunk_kv.empty()) chunk_kv.resize(kSwaEntryBytes);

  // Per row: q, the top-k (sorted visible subset, -1 padded), the CPU entry list.
  auto q = random_normal(static_cast<size_t>(rows) * kH * kD, c.seed + 7);
  if (c.precision == ActPrecision::kBF16) {
    for (auto& x : q)
      x = bf16_to_float(bf16_from_float(x));
  }
  std::vector<float> sink = random_normal(kH, c.seed + 9, 2.0f);
  std::vector<int32_t> topk(static_cast<size_t>(rows) * std::max(c.topk_width, 1), -1);
  std::vector<int32_t> seq_of_row(static_cast<size_t>(rows));
  std::vector<int64_t> pos_of_row(static_cast<size_t>(rows)), cs_of_row(static_cast<size_t>(rows)),
      r0_of_row(static_cast<size_t>(rows));
  const auto freqs = cpu::rope_frequencies<float>({64, 160000.0, 65536, 16.0, 32.0, 1.0});
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));

  Result res;
  res.ref.resize(static_cast<size_t>(rows) * kH * kD);
  for (int r = 0; r < rows; ++r) {
    const int s = c.row_seq[static_cast<size_t>(r)];
    const SeqSpec& sp = c.seqs[static_cast<size_t>(s)];
    seq_of_row[static_cast<size_t>(r)] = s;
    const int64_t pos = c.row_pos.empty() ? sp.pos : c.row_pos[static_cast<size_t>(r)];
    pos_of_row[static_cast<size_t>(r)] = pos;
    cs_of_row[static_cast<size_t>(r)] = chunk_start[static_cast<size_t>(s)];
    r0_of_row[static_cast<size_t>(r)] = chunk_row0[static_cast<size_t>(s)];
    std::vector<double> entries;
    auto add = [&](const float* v) { entries.insert(entries.end(), v, v + kD); };
    if (c.block_rows > 0) {
      // Model::dspark_attention: the filled ring slots, then every entry of the block.
      const int64_t cs = chunk_start[static_cast<size_t>(s)];
      for (int64_t t = std::max<int64_t>(0, cs - c.window); t < cs; ++t)
        add(swa.values[static_cast<size_t>(s)].data() + (kRing * c.window + t % c.window) * kD);
      for (int64_t k = 0; k < c.block_rows; ++k)
        add(chunk_vals[static_cast<size_t>(s)].data() + k * kD);
    }
    for (int64_t t = std::max<int64_t>(0, pos - c.window + 1); c.block_rows == 0 && t <= pos; ++t) {
      if (t < chunk_start[static_cast<size_t>(s)]) {
        add(swa.values[static_cast<size_t>(s)].data() + (kRing * c.window + t % c.window) * kD);
      } else {
        add(chunk_vals[static_cast<size_t>(s)].data() +
            (t - chunk_start[static_cast<size_t>(s)]) * kD);
      }
    }
    if (c.topk_width > 0) {
      std::vector<int32_t> all(static_cast<size_t>(sp.comp_len));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      const int64_t n = std::min<int64_t>(c.topk_width - c.topk_offset, sp.comp_len);
      std::vector<int32_t> sel(all.begin(), all.begin() + n);
      std::sort(sel.begin(), sel.end());
      for (int64_t i = 0; i < n; ++i) {
        topk[static_cast<size_t>(r * c.topk_width + c.topk_offset + i)] =
            sel[static_cast<size_t>(i)];
        add(comp.values[static_cast<size_t>(s)].data() + sel[static_cast<size_t>(i)] * kD);
      }
    }
    const int64_t n_ent = static_cast<int64_t>(entries.size()) / kD;
    std::vector<int32_t> idx(static_cast<size_t>(n_ent));
    std::iota(idx.begin(), idx.end(), 0);
    std::vector<double> qd(q.begin() + static_cast<int64_t>(r) * kH * kD,
                           q.begin() + static_cast<int64_t>(r + 1) * kH * kD);
    std::vector<double> sd(sink.begin(), sink.end());
    double* o = res.ref.data() + static_cast<int64_t>(r) * kH * kD;
    cpu::sparse_attention<double>(qd.data(), 1, kH, kD, entries.data(), n_ent, sd.data(),
                                  idx.data(), n_ent, scale, o);
    for (int h = 0; h < kH; ++h) {
      double* x = o + h * kD + (kD - 64);
      for (int i = 0; i < 32; ++i) {
        const float angle = static_cast<float>(pos) * freqs[static_cast<size_t>(i)];
        const double cs = std::cos(static_cast<double>(angle));
        const double sn = -std::sin(static_cast<double>(angle));
        const double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cs - b * sn;
        x[2 * i + 1] = a * sn + b * cs;
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
  DeviceBuffer d_out = poisoned<uint8_t>(static_cast<size_t>(rows) * kH * kD * esz, st);
  DeviceBuffer d_seq = upload(seq_of_row, st), d_pos = upload(pos_of_row, st);
  DeviceBuffer d_cs = upload(cs_of_row, st), d_r0 = upload(r0_of_row, st);
  DeviceBuffer d_topk = upload(topk, st), d_sink = upload(sink, st), d_freqs = upload(freqs, st);

  SparseAttnParams p;
  p.q = d_q.data();
  p.out = d_out.data();
  p.rows = rows;
  p.precision = c.precision;
  p.seq = d_seq.as<int32_t>();
  p.pos = d_pos.as<int64_t>();
  p.chunk_start = d_cs.as<int64_t>();
  p.chunk_row0 = d_r0.as<int64_t>();
  p.swa = {d_swa.as<uint8_t>(), kPageBytes,   d_swa_pages.as<int32_t>(),
           swa.pages_per_seq,   swa.per_page, kSwaEntryBytes};
  p.ring_block = kRing;
  p.window = c.window;
  p.chunk_kv = d_chunk.as<uint8_t>();
  p.comp = {d_comp.as<uint8_t>(), kPageBytes,    d_comp_pages.as<int32_t>(),
            comp.pages_per_seq,   comp.per_page, kCompEntryBytes};
  p.topk = d_topk.as<int32_t>();
  p.topk_width = c.topk_width;
  p.comp_entries = max_comp;
  p.sink = d_sink.as<float>();
  p.scale = static_cast<float>(scale);
  p.rope_freqs = d_freqs.as<float>();
  p.fp32_reference = c.fp32_reference;
  p.head_split = c.head_split;
  p.tensor_kernel = c.tensor_kernel;
  p.block_rows = c.block_rows;
  sparse_attention(p, st);
  DI_CUDA_CHECK(cudaStreamSynchronize(st));
  if (c.q_rope_check) {
    const size_t out_bytes = static_cast<size_t>(rows) * kH * kD * esz;
    DeviceBuffer d_fused = poisoned<uint8_t>(out_bytes, st);
    DeviceBuffer d_sep = poisoned<uint8_t>(out_bytes, st);
    SparseAttnParams f = p;
    f.q_rope = true;
    f.out = d_fused.data();
    sparse_attention(f, st);
    DeviceBuffer d_roped =
        c.precision == ActPrecision::kF32 ? upload(q, st) : upload(dense_test::to_bf16(q), st);
    dense_test::rope_rows(d_roped.data(), d_pos.as<int64_t>(), d_freqs.as<float>(), rows, kH, kD,
                          64, c.precision, st);
    SparseAttnParams sep = p;
    sep.q = d_roped.data();
    sep.out = d_sep.data();
    sparse_attention(sep, st);
    res.fused = download<uint8_t>(d_fused, out_bytes, st);
    res.separate = download<uint8_t>(d_sep, out_bytes, st);
  }
  if (c.precision == ActPrecision::kF32) {
    res.gpu = download<float>(d_out, static_cast<size_t>(rows) * kH * kD, st);
  } else {
    res.gpu =
        dense_test::from_bf16(download<uint16_t>(d_out, static_cast<size_t>(rows) * kH * kD, st));
  }
  if (c.single_row >= 0) {
    // The same row as a batch of one: every per-row array offset to it, a fresh output.
    const int64_t r = c.single_row;
    DeviceBuffer d_one = poisoned<uint8_t>(static_cast<size_t>(kH) * kD * esz, st);
    SparseAttnParams one = p;
    one.rows = 1;
    one.q = static_cast<const uint8_t*>(d_q.data()) + r * kH * kD * static_cast<int64_t>(esz);
    one.out = d_one.data();
    one.seq += r;
    one.pos += r;
    one.chunk_start += r;
    one.chunk_row0 += r;
    one.topk += r * c.topk_width;
    sparse_attention(one, st);
    if (c.precision == ActPrecision::kF32) {
      res.single = download<float>(d_one, static_cast<size_t>(kH) * kD, st);
    } else {
      res.single =
          dense_test::from_bf16(download<uint16_t>(d_one, static_cast<size_t>(kH) * kD, st));
    }
  }
  return res;
}

void expect_close(const Result& r, double tol, const char* what) {
  const size_t rh = r.ref.size() / kD;
  double worst = 0.0;
  for (size_t i = 0; i < rh; ++i) {
    double num = 0.0, den = 0.0;
    for (int d = 0; d < kD; ++d) {
      const double g = r.gpu[i * kD + static_cast<size_t>(d)];
      ASSERT_TRUE(std::isfinite(g)) << what << ": row*head " << i << " dim " << d;
      const double e = g - r.ref[i * kD + static_cast<size_t>(d)];
      num += e * e;
      den += r.ref[i * kD + static_cast<size_t>(d)] * r.ref[i * kD + static_cast<size_t>(d)];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
  }
  EXPECT_LE(worst, tol) << what;
  std::printf("%s: worst normwise relative error %.3g\n", what, worst);
}

// DSpark draft blocks of 5 rows (V4.1's dspark_block_size) after contexts of 1, 60, 127, 128,
// 129 and 5000 accepted tokens (ring partly filled, exactly full, wrapped): each row at its own
// position (its RoPE), all rows seeing the same entries.
Case draft_case(ActPrecision prec, uint64_t seed) {
  Case c;
  c.precision = prec;
  c.seed = seed;
  c.block_rows = 5;
  c.topk_width = 0;
  for (const int64_t accepted : {1, 60, 127, 128, 129, 5000}) {
    const int s = static_cast<int>(c.seqs.size());
    c.seqs.push_back({accepted + 4, 5, 0});  // chunk positions accepted .. accepted + 4
    for (int r = 0; r < 5; ++r) {
      c.row_seq.push_back(s);
      c.row_pos.push_back(accepted + r);
    }
  }
  return c;
}

TEST(SparseAttentionGpu, DraftBlockMatchesCpu) {
  DI_REQUIRE_GPU();
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    for (const bool generic : {false, true}) {
      Case c = draft_case(prec, 61);
      c.fp32_reference = generic && prec == ActPrecision::kF32;
      if (generic && !c.fp32_reference) continue;
      c.single_row = 17;
      const Result r = run_case(c);
      expect_close(r, prec == ActPrecision::kF32 ? (generic ? 1e-5 : 1e-4) : 1e-2,
                   generic ? "draft block, fp32 reference kernel" : "draft block");
      // A row of the block alone gives the same bits as within the batch.
      ASSERT_EQ(r.single.size(), static_cast<size_t>(kH) * kD);
      EXPECT_EQ(0, std::memcmp(r.single.data(), r.gpu.data() + 17 * kH * kD,
                               r.single.size() * sizeof(float)));
    }
  }
}

Case decode_case(ActPrecision prec, uint64_t seed) {
  Case c;
  c.precision = prec;
  c.seed = seed;
  // Decode rows: short (partial window, few compressed), long (full window, > 512 compressed),
  // one whose last 3 window positions come from chunk_kv, one with no compressed entries yet.
  // And one at the end of a 64K context (32K compressed entries of a ratio-2 owner).
  c.seqs = {{5, 0, 2},  {4000, 0, 2000},   {777, 3, 388},
            {60, 0, 0}, {20000, 1, 10000}, {65535, 0, 32768}};
  c.row_seq = {0, 1, 2, 3, 4, 5};
  return c;
}

TEST(SparseAttentionGpu, DecodeFp32MatchesCpu) {
  DI_REQUIRE_GPU();
  expect_close(run_case(decode_case(ActPrecision::kF32, 11)), 1e-4, "decode fp32");
}

TEST(SparseAttentionGpu, DecodeBf16MatchesCpu) {
  DI_REQUIRE_GPU();
  expect_close(run_case(decode_case(ActPrecision::kBF16, 12)), 1e-2, "decode bf16");
}

TEST(SparseAttentionGpu, PrefillChunkMatchesCpu) {
  DI_REQUIRE_GPU();
  // The rows of a prefill chunk at positions 1000..1199, each as its own sequence (its own ring
  // and chunk_kv slice): row i sees ring slots for positions < 1000 and i + 1 chunk entries, and
  // its own top-k. (PrefillRowsOfOneSequence covers rows sharing one sequence.)
  Case c;
  c.seed = 21;
  for (int64_t i = 0; i < 200; ++i) {
    c.seqs.push_back({1000 + i, i + 1, (1000 + i + 1) / 2});
    c.row_seq.push_back(static_cast<int>(i));
  }
  expect_close(run_case(c), 1e-4, "prefill chunk fp32");
}

TEST(SparseAttentionGpu, PrefillRowsOfOneSequence) {
  DI_REQUIRE_GPU();
  // One sequence, a 200-row chunk at positions 1000..1199: all rows share one page-table row and
  // one chunk_kv slice (positions >= 1000); each row's window reaches back into the ring.
  Case c;
  c.seed = 23;
  c.seqs = {{1199, 200, 600}};
  for (int64_t i = 0; i < 200; ++i) {
    c.row_seq.push_back(0);
    c.row_pos.push_back(1000 + i);
  }
  expect_close(run_case(c), 1e-4, "prefill rows of one sequence, fp32");
}

TEST(SparseAttentionGpu, WindowOnlyLayer) {
  DI_REQUIRE_GPU();
  Case c = decode_case(ActPrecision::kF32, 31);
  c.topk_width = 0;
  expect_close(run_case(c), 1e-4, "window only");
}

TEST(SparseAttentionGpu, WindowAndTopkWidthEdges) {
  DI_REQUIRE_GPU();
  // A window of 64 (ring slots r * 64 + p % 64), a top-k width that is not a multiple of 128
  // (chunks of 128, 128 and 44 slots), and the widest top-k one cluster covers (896: 8 CTAs).
  Case c = decode_case(ActPrecision::kF32, 51);
  c.window = 64;
  c.topk_width = 300;
  expect_close(run_case(c), 1e-4, "window 64, top-k width 300");
  Case w = decode_case(ActPrecision::kBF16, 52);
  w.topk_width = 896;
  expect_close(run_case(w), 1e-2, "top-k width 896, bf16");
}

TEST(SparseAttentionGpu, RowIsBatchInvariant) {
  DI_REQUIRE_GPU();
  // Each row of the decode batch alone: bitwise the same output as inside the batch of six, for
  // the mma.sync kernel (fp32) and the wgmma kernel (bf16).
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    for (int r = 0; r < 6; ++r) {
      Case c = decode_case(prec, 41);
      c.single_row = r;
      const Result res = run_case(c);
      ASSERT_EQ(std::memcmp(res.single.data(), res.gpu.data() + static_cast<size_t>(r) * kH * kD,
                            static_cast<size_t>(kH) * kD * sizeof(float)),
                0)
          << (prec == ActPrecision::kF32 ? "fp32" : "bf16") << " row " << r;
    }
  }
}

TEST(SparseAttentionGpu, QRopeIsApplyRopeThenAttention) {
  DI_REQUIRE_GPU();
  // RoPE of q fused into the kernel's q load: bitwise apply_rope followed by the attention, for
  // both storages, in the tensor-core kernel and in the generic one (fp32_reference).
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    for (const bool generic : {false, true}) {
      Case c = decode_case(prec, 43);
      c.fp32_reference = generic;
      c.q_rope_check = true;
      const Result res = run_case(c);
      ASSERT_EQ(res.fused.size(), res.separate.size());
      EXPECT_EQ(res.fused, res.separate)
          << (prec == ActPrecision::kF32 ? "fp32" : "bf16") << (generic ? " generic" : "");
      // And RoPE changed something: the rotated and unrotated q give different outputs.
      const size_t n = res.gpu.size();
      std::vector<float> fused(n);
      if (prec == ActPrecision::kF32) {
        std::memcpy(fused.data(), res.fused.data(), n * sizeof(float));
      } else {
        std::vector<uint16_t> b(n);
        std::memcpy(b.data(), res.fused.data(), n * sizeof(uint16_t));
        fused = dense_test::from_bf16(b);
      }
      EXPECT_NE(fused, res.gpu);
    }
  }
}

TEST(SparseAttentionGpu, HeadSplitsGiveTheSameBits) {
  DI_REQUIRE_GPU();
  // The mma.sync kernel: one CTA per (row, chunk) with all 64 heads, or two with 32 each (what a
  // small batch gets): the same bytes, so the choice by grid size keeps a row's output
  // batch-invariant. Both storages, q_rope fused, a window of 64, a top-k width off the 128 grid
  // and the widest one.
  std::vector<Case> cases;
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    Case c = decode_case(prec, 61);
    c.q_rope_check = true;
    cases.push_back(c);
    c = decode_case(prec, 62);
    c.window = 64;
    c.topk_width = 300;
    cases.push_back(c);
    c = decode_case(prec, 63);
    c.topk_width = 896;
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    Case c = cases[i];
    c.tensor_kernel = AttnTensorKernel::kMmaSync;  // the head split is the mma.sync kernel's
    c.head_split = 1;
    const Result one = run_case(c);
    c.head_split = 2;
    const Result two = run_case(c);
    ASSERT_EQ(one.gpu.size(), two.gpu.size());
    EXPECT_EQ(std::memcmp(one.gpu.data(), two.gpu.data(), one.gpu.size() * sizeof(float)), 0)
        << "case " << i;
    EXPECT_EQ(one.fused, two.fused) << "case " << i << " (q_rope)";
    // And both are the attention (not the same wrong bytes).
    expect_close(two, c.precision == ActPrecision::kF32 ? 1e-4 : 1e-2, "two CTAs per chunk");
  }
}

// The wgmma kernel's tile products alone (attention_detail::wgmma_tile_probe: its operand layout,
// descriptors and fragment maps): S = Q K^T over 512 dims split between the warpgroups and
// summed, and O = bf16(S) V with V the K tile read MN-major, against float64 on the same bf16
// inputs (O from the GPU's own S, so that each product is checked alone). A layout error moves
// values to other rows or columns: O(1) errors, far above the fp32 accumulation's ~1e-7.
TEST(SparseAttentionGpu, WgmmaTileProductsMatchCpu) {
  DI_REQUIRE_GPU();
  const std::vector<uint16_t> q = dense_test::to_bf16(random_normal(kH * kD, 91));
  const std::vector<uint16_t> kv = dense_test::to_bf16(random_normal(64 * kD, 92));
  Stream stream;
  const cudaStream_t st = stream.get();
  DeviceBuffer d_q = upload(q, st), d_kv = upload(kv, st);
  DeviceBuffer d_s = poisoned<float>(static_cast<size_t>(kH) * 64, st);
  DeviceBuffer d_o = poisoned<float>(static_cast<size_t>(kH) * kD, st);
  attention_detail::wgmma_tile_probe(d_q.as<uint16_t>(), d_kv.as<uint16_t>(), d_s.as<float>(),
                                     d_o.as<float>(), st);
  const std::vector<float> s = download<float>(d_s, static_cast<size_t>(kH) * 64, st);
  const std::vector<float> o = download<float>(d_o, static_cast<size_t>(kH) * kD, st);
  double worst_s = 0.0, worst_o = 0.0;
  for (int h = 0; h < kH; ++h) {
    double num = 0.0, den = 0.0;
    for (int e = 0; e < 64; ++e) {
      double ref = 0.0;
      for (int d = 0; d < kD; ++d)
        ref += static_cast<double>(bf16_to_float(q[h * kD + d])) * bf16_to_float(kv[e * kD + d]);
      const double g = s[static_cast<size_t>(h * 64 + e)];
      ASSERT_TRUE(std::isfinite(g)) << "S row " << h << " entry " << e;
      num += (g - ref) * (g - ref);
      den += ref * ref;
    }
    worst_s = std::max(worst_s, std::sqrt(num / den));
    num = den = 0.0;
    for (int d = 0; d < kD; ++d) {
      double ref = 0.0;
      for (int e = 0; e < 64; ++e) {
        const float p = bf16_to_float(bf16_from_float(s[static_cast<size_t>(h * 64 + e)]));
        ref += static_cast<double>(p) * bf16_to_float(kv[e * kD + d]);
      }
      const double g = o[static_cast<size_t>(h * kD + d)];
      ASSERT_TRUE(std::isfinite(g)) << "O row " << h << " dim " << d;
      num += (g - ref) * (g - ref);
      den += ref * ref;
    }
    worst_o = std::max(worst_o, std::sqrt(num / den));
  }
  EXPECT_LE(worst_s, 1e-5) << "S = Q K^T";
  EXPECT_LE(worst_o, 1e-5) << "O = P V";
  std::printf("wgmma tile probe: worst normwise relative error S %.3g, O %.3g\n", worst_s, worst_o);
}

// bf16 precision runs the wgmma kernel (tensor_kernel kAuto); the mma.sync kernel stays
// selectable. Both must be the attention on every case shape: decode rows (partial windows, rows
// without compressed entries, 32K compressed entries), a 200-row prefill chunk, a window-only
// layer, a window of 64 with a top-k width off the 128 grid, the widest top-k, leading masked
// top-k slots (whole masked tiles and chunks before valid ones) and DSpark draft blocks (a ring
// whose first 64 slots are empty: the second tile alone).
TEST(SparseAttentionGpu, Bf16KernelsBothMatchCpu) {
  DI_REQUIRE_GPU();
  std::vector<std::pair<std::string, Case>> cases;
  cases.emplace_back("decode", decode_case(ActPrecision::kBF16, 71));
  Case prefill;
  prefill.precision = ActPrecision::kBF16;
  prefill.seed = 72;
  for (int64_t i = 0; i < 200; ++i) {
    prefill.seqs.push_back({1000 + i, i + 1, (1000 + i + 1) / 2});
    prefill.row_seq.push_back(static_cast<int>(i));
  }
  cases.emplace_back("prefill chunk", prefill);
  Case window_only = decode_case(ActPrecision::kBF16, 73);
  window_only.topk_width = 0;
  cases.emplace_back("window only", window_only);
  Case edges = decode_case(ActPrecision::kBF16, 74);
  edges.window = 64;
  edges.topk_width = 300;
  cases.emplace_back("window 64, top-k width 300", edges);
  Case wide = decode_case(ActPrecision::kBF16, 75);
  wide.topk_width = 896;
  cases.emplace_back("top-k width 896", wide);
  Case holes = decode_case(ActPrecision::kBF16, 76);
  holes.topk_offset = 200;  // slots 0..199 masked: chunk 1 and half of chunk 2 empty
  cases.emplace_back("leading masked top-k slots", holes);
  cases.emplace_back("draft blocks", draft_case(ActPrecision::kBF16, 77));
  for (auto& [name, c] : cases) {
    c.tensor_kernel = AttnTensorKernel::kMmaSync;
    const Result mma = run_case(c);
    expect_close(mma, 1e-2, (name + ", bf16 mma.sync").c_str());
    c.tensor_kernel = AttnTensorKernel::kWgmma;
    const Result wg = run_case(c);
    expect_close(wg, 1e-2, (name + ", bf16 wgmma").c_str());
    c.tensor_kernel = AttnTensorKernel::kAuto;
    const Result aut = run_case(c);
    EXPECT_EQ(aut.gpu, wg.gpu) << name << ": kAuto is the wgmma kernel in bf16";
  }
}

using test::error_of;

// Launcher checks (no device needed: they run before any CUDA call).
TEST(SparseAttentionGpu, BadParamsAreRejected) {
  SparseAttnParams p;
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("rows 0"), std::string::npos);
  p.rows = 1;
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("null q/out"), std::string::npos);
  // Fake, aligned device addresses: every case below must fail before a launch.
  alignas(16) static const int32_t pages[4] = {0, 1, 2, 3};
  auto* fake = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
  p.q = fake;
  p.out = fake;
  p.seq = pages;
  p.pos = reinterpret_cast<const int64_t*>(fake);
  p.chunk_start = p.pos;
  p.chunk_row0 = p.pos;
  p.sink = reinterpret_cast<const float*>(fake);
  p.rope_freqs = p.sink;
  p.scale = 0.044f;
  p.swa = {fake, 4224, pages, 4, 8, kSwaEntryBytes};  // 32 entries per row
  p.ring_block = 0;
  p.window = 128;
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("128 entries addressed"),
            std::string::npos);  // one ring of 128 needs 128 entries, the row holds 32
  p.swa = {fake, 16 * 4224, pages, 4, 128, kSwaEntryBytes};
  p.ring_block = 3;  // rings 0..3 need 512 entries; 4 pages x 128 hold them
  p.topk_width = 512;
  p.topk = pages;
  p.comp = {fake, 4608, pages, 4, 16, kCompEntryBytes};
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("comp_entries must be positive"),
            std::string::npos);
  p.comp_entries = 100;  // 4 pages x 16 entries hold 64
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("100 entries addressed"),
            std::string::npos);
  p.comp_entries = 64;
  p.comp.page_bytes = 4616;  // holds 16 entries, but not a multiple of 16
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("16-byte aligned"),
            std::string::npos);
  p.comp.page_bytes = 4608;
  p.q = fake + 4;
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("q, out and chunk_kv"),
            std::string::npos);
  p.q = fake;
  p.topk_width = 1024;  // more than a cluster of 8 CTAs covers
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("topk_width 1024"),
            std::string::npos);
  p.topk_width = 512;
  p.head_split = 3;
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("head_split 3"),
            std::string::npos);
  p.head_split = 0;
  p.precision = ActPrecision::kF32;
  p.tensor_kernel = AttnTensorKernel::kWgmma;
  EXPECT_NE(error_of([&] { sparse_attention(p, nullptr); }).find("bf16 precision only"),
            std::string::npos);
}

}  // namespace
}  // namespace di
