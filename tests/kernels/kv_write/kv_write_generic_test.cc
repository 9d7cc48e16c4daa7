// The V4.1 cache writers at the small test models' widths (fixtures/v41-tiny-a: latent 128, RoPE
// 64, index keys 64, window 8) against the same CPU reference as kv_write_test.cc (cpu::rms_norm,
// cpu::RopeTable<float>, cpu::linear, the fake-quant simulations, packed with the generalised
// cpu::kv_pack): the launchers' generic kernels. Three sequences through mixed batches: prefill
// chunks longer than the window, odd starts and lengths (the ratio-2 groups split across
// launches, carried in the state), decode steps, shuffled rows, fp32 and bf16 inputs; poisoned
// paged pools whose bytes outside the written entries must keep the poison.
//
// Tolerance: kv_write_test.cc's (kernels/params/kv_write.h): the kernels follow the CPU's fp32
// order, so the bytes are expected identical; a one-ulp difference of a transcendental (RoPE
// cos/sin, the ratio-2 exp) may move a value by one quantisation step. So every decoded value is
// within one grid step and >= 99.9% of the bytes of each format are identical. Ratio-1 latents and
// the carried ratio-2 state bitwise, ratio-2 latents within 1e-5 * (|x| + 1).
// Also without a GPU: the launchers reject unsupported widths and mismatched tables.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp8.h"
#include "core/tensor_view.h"
#include "kernels/cpu/kv_pack.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/kv_write/kv_write.cuh"
#include "kernels/dense_ops/dense_ops_test_util.h"

namespace di::kv_write_generic_test {
namespace {

using dense_test::download;
using dense_test::float_bits;
using dense_test::from_bf16;
using dense_test::poisoned;
using dense_test::random_normal;
using dense_test::to_bf16;
using dense_test::upload;

constexpr double kEps = 1e-20;  // rms_norm_eps of fixtures/v41-tiny-a
constexpr int kDim = 128;       // head_dim: the latent / KV width
constexpr int kRope = 64;       // qk_rope_head_dim
constexpr int kIdxDim = 64;     // index_head_dim
constexpr int kWindow = 8;      // sliding_window
constexpr int kSeqs = 3;
constexpr uint8_t kPoison = 0xA5;

cpu::RopeParams rope_params(bool yarn) {
  cpu::RopeParams p;
  p.rope_dim = kRope;
  p.base = yarn ? 160000.0 : 10000.0;
  if (yarn) {
    p.original_seq_len = 65536;
    p.factor = 16;
    p.beta_fast = 32;
    p.beta_slow = 1;
  }
  return p;
}

enum class Format { kSwa, kComp, kIndex };

int values_of(Format f) {
  return f == Format::kIndex ? kIdxDim : kDim;
}
int bytes_of(Format f) {
  return f == Format::kSwa    ? swa_entry_bytes(kDim)
         : f == Format::kComp ? comp_entry_bytes(kDim)
                              : index_key_bytes(kIdxDim);
}

std::vector<uint8_t> pack(Format f, const std::vector<float>& v) {
  EXPECT_EQ(static_cast<int>(v.size()), values_of(f));
  std::vector<uint8_t> out(static_cast<size_t>(bytes_of(f)));
  if (f == Format::kSwa) {
    cpu::pack_swa_entry(v, out);
  } else if (f == Format::kComp) {
    cpu::pack_comp_entry(v, out);
  } else {
    cpu::pack_index_key(v, out);
  }
  return out;
}

// Decoded values and the scale of each value's block.
void decode(Format f, std::span<const uint8_t> e, std::vector<float>& v, std::vector<float>& s) {
  const int n = values_of(f);
  v.resize(static_cast<size_t>(n));
  s.resize(static_cast<size_t>(n));
  if (f == Format::kSwa) {
    cpu::unpack_swa_entry(e, v);
  } else if (f == Format::kComp) {
    cpu::unpack_comp_entry(e, v);
  } else {
    cpu::unpack_index_key(e, v);
  }
  for (int d = 0; d < n; ++d) {
    const auto i = static_cast<size_t>(d);
    if (f == Format::kSwa) {
      s[i] = e8m0_to_float(e[static_cast<size_t>(n + d / kSwaScaleBlock)]);
    } else if (f == Format::kComp) {
      s[i] = e4m3_to_float(e[static_cast<size_t>(n / 2 + d / kCompScaleBlock)]);
    } else {
      s[i] = e8m0_to_float(e[static_cast<size_t>(n / 2 + d / kIndexScaleBlock)]);
    }
  }
}

// The element grid step at |v| with scale s (e4m3: 3 mantissa bits, subnormal step 2^-9; e2m1:
// {0, .5, 1, 1.5, 2, 3, 4, 6}).
double grid_step(Format f, float v, float s) {
  if (!(s > 0.0f) || !std::isfinite(s)) return 0.0;
  const double q = std::fabs(static_cast<double>(v)) / s;
  if (f == Format::kSwa) {
    const int e = q > 0 ? std::max(static_cast<int>(std::floor(std::log2(q))), -6) : -6;
    return std::ldexp(static_cast<double>(s), e - 3);
  }
  return static_cast<double>(s) * (q < 2 ? 0.5 : q < 4 ? 1.0 : 2.0);
}

struct Stats {
  int64_t bytes = 0;
  int64_t identical = 0;
};

// Entry g against entry e: every value within one grid step; identical bytes counted.
void compare_entry(Format f, std::span<const uint8_t> g, std::span<const uint8_t> e, Stats& st,
                   const std::string& what) {
  for (size_t i = 0; i < g.size(); ++i)
    st.identical += g[i] == e[i];
  st.bytes += static_cast<int64_t>(g.size());
  std::vector<float> gv, gs, ev, es;
  decode(f, g, gv, gs);
  decode(f, e, ev, es);
  for (size_t d = 0; d < gv.size(); ++d) {
    const double tol = std::max(grid_step(f, gv[d], gs[d]), grid_step(f, ev[d], es[d]));
    ASSERT_LE(std::fabs(static_cast<double>(gv[d]) - ev[d]), tol)
        << what << " value " << d << ": gpu " << gv[d] << " vs cpu " << ev[d];
  }
}

// A poisoned paged pool (shuffled page ids, slack bytes per page) and its host mirror.
class Pool {
 public:
  Pool(Format f, int32_t per_page, int slack, int64_t entries_per_seq, uint64_t seed,
       cudaStream_t stream)
      : format_(f) {
    table_.entry_bytes = bytes_of(f);
    table_.entries_per_page = per_page;
    // Pages stay 16-byte aligned (check_paged_table) whatever the entry size.
    table_.page_bytes =
        (static_cast<int64_t>(per_page) * table_.entry_bytes + slack + 15) / 16 * 16;
    table_.pages_stride = static_cast<int32_t>((entries_per_seq + per_page - 1) / per_page);
    const int32_t used = kSeqs * table_.pages_stride;
    const int32_t total = used + 3;
    std::vector<int32_t> perm(static_cast<size_t>(total));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    pages_.assign(perm.begin(), perm.begin() + used);
    mirror_.assign(static_cast<size_t>(total * table_.page_bytes), kPoison);
    written_.assign(mirror_.size(), 0);
    pool_d_ = DeviceBuffer(mirror_.size(), "kv_write generic test pool");
    pool_d_.fill_async(kPoison, stream);
    pages_d_ = upload(pages_, stream, "kv_write generic test pages");
    table_.pool = pool_d_.as<uint8_t>();
    table_.pages = pages_d_.as<int32_t>();
  }

  const PagedTable& device() const { return table_; }

  void expect(int32_t seq, int64_t e, const std::vector<uint8_t>& bytes) {
    PagedTable host = table_;
    host.pool = mirror_.data();
    host.pages = pages_.data();
    const auto off = static_cast<size_t>(paged_entry(host, seq, e) - mirror_.data());
    std::copy(bytes.begin(), bytes.end(), mirror_.begin() + static_cast<std::ptrdiff_t>(off));
    std::fill_n(written_.begin() + static_cast<std::ptrdiff_t>(off), bytes.size(), uint8_t{1});
    entries_[{seq, e}] = off;
  }

  // Poison outside the entries; every entry written so far against the mirror.
  void check(const char* what, cudaStream_t stream, Stats& st) {
    SCOPED_TRACE(what);
    const std::vector<uint8_t> got = download<uint8_t>(pool_d_, mirror_.size(), stream);
    int64_t clobbered = 0;
    for (size_t i = 0; i < got.size(); ++i)
      clobbered += written_[i] == 0 && got[i] != kPoison;
    EXPECT_EQ(clobbered, 0) << "bytes outside the entries changed";
    const auto n = static_cast<size_t>(table_.entry_bytes);
    for (const auto& [key, off] : entries_) {
      compare_entry(format_, std::span<const uint8_t>(got.data() + off, n),
                    std::span<const uint8_t>(mirror_.data() + off, n), st,
                    "seq " + std::to_string(key.first) + " entry " + std::to_string(key.second));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

 private:
  Format format_;
  PagedTable table_;
  std::vector<int32_t> pages_;
  std::vector<uint8_t> mirror_;
  std::vector<uint8_t> written_;
  std::map<std::pair<int32_t, int64_t>, size_t> entries_;
  DeviceBuffer pool_d_;
  DeviceBuffer pages_d_;
};

// Window kv before act_quant: kv_norm, RoPE on the last 64 at pos.
std::vector<float> ref_window(const float* x, const std::vector<float>& w,
                              const cpu::RopeTable<float>& rope, int64_t pos) {
  std::vector<float> v(x, x + kDim);
  cpu::rms_norm<float>(v.data(), 1, kDim, w.data(), kEps);
  rope.apply(v.data() + (kDim - kRope), pos);
  return v;
}

std::vector<float> ref_comp(std::vector<float> latent, const cpu::RopeTable<float>& rope,
                            int64_t pos) {
  rope.apply(latent.data() + (kDim - kRope), pos);
  return latent;
}

std::vector<float> ref_index_key(const std::vector<float>& latent, const cpu::WeightRef& wk,
                                 const std::vector<float>& knorm, const cpu::RopeTable<float>& rope,
                                 int64_t pos) {
  std::vector<float> k(kIdxDim);
  cpu::linear<float>(latent.data(), 1, wk, k.data());
  cpu::rms_norm<float>(k.data(), 1, kIdxDim, knorm.data(), kEps);
  rope.apply(k.data() + (kIdxDim - kRope), pos);
  return k;
}

// Model<float>::compress's ratio-2 tail at width kDim (slots by position parity, score -inf).
struct Tail {
  std::vector<float> kv = std::vector<float>(2 * kDim, 0.0f);
  std::vector<float> score = std::vector<float>(2 * kDim, -INFINITY);
};

bool ref_ratio2_row(Tail& t, const float* kv, const float* score, int64_t pos,
                    const std::vector<float>& norm, std::vector<float>& latent) {
  const int64_t ratio = 2, hd = kDim;
  const int64_t slot = pos % ratio;
  std::copy_n(kv, hd, t.kv.begin() + slot * hd);
  std::copy_n(score, hd, t.score.begin() + slot * hd);
  if ((pos + 1) % ratio != 0) return false;
  latent.assign(static_cast<size_t>(hd), 0.0f);
  for (int64_t d = 0; d < hd; ++d) {
    float mx = -INFINITY;
    for (int64_t s = 0; s < ratio; ++s)
      mx = std::max(mx, t.score[static_cast<size_t>(s * hd + d)]);
    float den = 0;
    for (int64_t s = 0; s < ratio; ++s)
      den += std::exp(t.score[static_cast<size_t>(s * hd + d)] - mx);
    float acc = 0;
    for (int64_t s = 0; s < ratio; ++s) {
      const float p = std::exp(t.score[static_cast<size_t>(s * hd + d)] - mx) / den;
      acc += t.kv[static_cast<size_t>(s * hd + d)] * p;
    }
    latent[static_cast<size_t>(d)] = acc;
  }
  cpu::rms_norm<float>(latent.data(), 1, hd, norm.data(), kEps);
  return true;
}

struct Batch {
  std::vector<int32_t> seq;
  std::vector<int64_t> pos;
  std::vector<int64_t> seq_end;  // [kSeqs] one past the last position in this batch
};

Batch make_batch(const std::vector<std::pair<int32_t, int64_t>>& chunks,
                 std::vector<int64_t>& next_pos, std::mt19937_64& rng) {
  Batch b;
  b.seq_end.assign(kSeqs, 0);
  for (const auto& [s, len] : chunks) {
    for (int64_t i = 0; i < len; ++i) {
      b.seq.push_back(s);
      b.pos.push_back(next_pos[static_cast<size_t>(s)]++);
    }
    b.seq_end[static_cast<size_t>(s)] = next_pos[static_cast<size_t>(s)];
  }
  std::vector<size_t> perm(b.seq.size());
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  Batch out = b;
  for (size_t i = 0; i < perm.size(); ++i) {
    out.seq[i] = b.seq[perm[i]];
    out.pos[i] = b.pos[perm[i]];
  }
  return out;
}

std::vector<size_t> cpu_order(const Batch& b) {
  std::vector<size_t> o(b.seq.size());
  std::iota(o.begin(), o.end(), size_t{0});
  std::sort(o.begin(), o.end(), [&](size_t x, size_t y) {
    return std::pair(b.seq[x], b.pos[x]) < std::pair(b.seq[y], b.pos[y]);
  });
  return o;
}

// Random rows; with > 3 rows a zero row, a huge and a tiny one.
std::vector<float> make_rows(size_t rows, uint64_t seed, bool bf16) {
  std::vector<float> x = random_normal(rows * kDim, seed, 1.0f);
  if (rows > 3) {
    std::fill_n(x.begin(), kDim, 0.0f);
    for (int i = 0; i < kDim; ++i) {
      x[static_cast<size_t>(kDim + i)] *= 1e3f;
      x[static_cast<size_t>(2 * kDim + i)] *= 1e-6f;
    }
  }
  if (bf16) x = from_bf16(to_bf16(x));
  return x;
}

DeviceBuffer upload_act(const std::vector<float>& x, bool bf16, cudaStream_t stream) {
  return bf16 ? upload(to_bf16(x), stream) : upload(x, stream);
}

std::vector<float> norm_weight(size_t n, uint64_t seed) {
  std::vector<float> w = random_normal(n, seed, 0.1f);
  for (float& v : w)
    v += 1.0f;
  return w;
}

// Chunks longer than the window (11, 13, 9), odd starts and lengths (ratio-2 groups split across
// launches), decode steps.
const std::vector<std::vector<std::pair<int32_t, int64_t>>>& schedule() {
  static const std::vector<std::vector<std::pair<int32_t, int64_t>>> s = {
      {{0, 5}, {1, 11}, {2, 1}}, {{0, 1}, {1, 1}, {2, 13}}, {{0, 3}, {1, 2}, {2, 1}},
      {{0, 1}, {1, 1}, {2, 1}},  {{1, 9}, {0, 1}},          {{2, 2}, {0, 1}, {1, 1}},
      {{0, 1}, {1, 1}, {2, 1}},
  };
  return s;
}

TEST(KvWriteGeneric, LaunchersRejectUnsupportedWidths) {
  alignas(16) static const float row[kDim] = {};
  alignas(16) static uint8_t pool[1024] = {};
  static const int32_t pages[1] = {0};
  PagedTable t;
  t.pool = pool;
  t.pages = pages;
  t.pages_stride = 1;
  t.entries_per_page = 1;
  t.page_bytes = 1024;
  t.entry_bytes = swa_entry_bytes(kDim);
  SwaWriteParams s;
  s.x = row;
  s.rows = 1;
  s.table = t;
  s.dim = kDim;
  s.rope_dim = kRope;
  s.dim = 100;  // not a multiple of 32
  EXPECT_THROW(swa_write(s, nullptr), Error);
  s.dim = kDim;
  s.rope_dim = 63;  // odd
  EXPECT_THROW(swa_write(s, nullptr), Error);
  s.rope_dim = 2 * kDim;  // wider than the row
  EXPECT_THROW(swa_write(s, nullptr), Error);
  s.rope_dim = kRope;
  s.table.entry_bytes = kSwaEntryBytes;  // the 512-wide entry for a 128-wide row
  EXPECT_THROW(swa_write(s, nullptr), Error);
  s.table.entry_bytes = swa_entry_bytes(kDim);
  s.x_stride = kDim - 4;  // rows overlap
  EXPECT_THROW(swa_write(s, nullptr), Error);

  CompressRatio1Params c;
  c.x = row;
  c.rows = 1;
  c.table = t;
  c.table.entry_bytes = kCompEntryBytes;
  c.dim = kDim;
  c.rope_dim = kRope;
  EXPECT_THROW(compress_ratio1(c, nullptr), Error);
  c.dim = kKvGenericMaxFloats + 32;  // does not fit the shared row
  EXPECT_THROW(compress_ratio1(c, nullptr), Error);
  CompressRatio2Params c2;
  c2.kv = row;
  c2.score = row;
  c2.works = 1;
  c2.table = t;
  c2.table.entry_bytes = comp_entry_bytes(kDim);
  c2.dim = 96;
  c2.rope_dim = 0;
  EXPECT_THROW(compress_ratio2(c2, nullptr), Error);

  IndexKeyParams k;
  k.table = t;
  k.table.entry_bytes = index_key_bytes(kIdxDim);
  k.latent_dim = kDim;
  k.dim = kIdxDim;
  k.rope_dim = kRope;
  k.latent_dim = 130;  // not a multiple of 4
  EXPECT_THROW(index_key_write(k, nullptr), Error);
  k.latent_dim = kDim;
  k.dim = 48;  // not a multiple of 32
  EXPECT_THROW(index_key_write(k, nullptr), Error);
  k.dim = kIdxDim;
  k.table.entry_bytes = kIndexKeyBytes;  // the 128-wide key for a 64-wide one
  EXPECT_THROW(index_key_write(k, nullptr), Error);
  k.table.entry_bytes = index_key_bytes(kIdxDim);
  EXPECT_NO_THROW(index_key_write(k, nullptr));  // valid, no groups: returns before any launch
}

// GPU parity over the schedule at the small widths: window KV (ring block 0 plain/fp32 with the
// prefill call order, block 2 YaRN/bf16), the ratio-1 owner and a ratio-2 owner (compressor +
// index keys each).
TEST(KvWriteGeneric, MatchesCpuReferenceAtSmallWidths) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  std::mt19937_64 rng(4242);
  const cpu::RopeTable<float> plain(rope_params(false)), yarn(rope_params(true));
  const DeviceBuffer plain_d = upload(plain.freqs(), st), yarn_d = upload(yarn.freqs(), st);

  const auto kv_norm_a = norm_weight(kDim, 31), kv_norm_b = norm_weight(kDim, 32);
  const auto comp_norm1 = norm_weight(kDim, 33), comp_norm2 = norm_weight(kDim, 34);
  const auto k_norm1 = norm_weight(kIdxDim, 35), k_norm2 = norm_weight(kIdxDim, 36);
  const auto wk1 = to_bf16(random_normal(size_t{kIdxDim} * kDim, 37, 0.1f));
  const auto wk2 = to_bf16(random_normal(size_t{kIdxDim} * kDim, 38, 0.1f));
  const auto wk_ref = [](const std::vector<uint16_t>& w) {
    ConstTensorView v{reinterpret_cast<const std::byte*>(w.data()), DType::kBF16,
                      Shape{kIdxDim, kDim}};
    return cpu::dense_weight(v, "indexer.wk");
  };
  const cpu::WeightRef wk1_ref = wk_ref(wk1), wk2_ref = wk_ref(wk2);
  const DeviceBuffer kv_norm_a_d = upload(kv_norm_a, st), kv_norm_b_d = upload(kv_norm_b, st);
  const DeviceBuffer comp_norm1_d = upload(comp_norm1, st), comp_norm2_d = upload(comp_norm2, st);
  const DeviceBuffer k_norm1_d = upload(k_norm1, st), k_norm2_d = upload(k_norm2, st);
  const DeviceBuffer wk1_d = upload(wk1, st), wk2_d = upload(wk2, st);

  constexpr int32_t kBlocks = 3;  // ring blocks; block 1 is never written
  Pool swa(Format::kSwa, 4, 20, kBlocks * kWindow, 201, st);
  Pool comp1(Format::kComp, 8, 4, 64, 202, st);
  Pool comp2(Format::kComp, 5, 16, 32, 203, st);
  Pool idx1(Format::kIndex, 7, 8, 64, 204, st);
  Pool idx2(Format::kIndex, 16, 0, 32, 205, st);

  const std::vector<int32_t> state_rows = {1, 2, 0};
  const int64_t state_floats = ratio2_state_floats(kDim);
  std::vector<Tail> tails(kSeqs);
  std::vector<float> state0(static_cast<size_t>(kSeqs * state_floats));
  for (int32_t s = 0; s < kSeqs; ++s) {
    float* p = state0.data() + state_rows[static_cast<size_t>(s)] * state_floats;
    std::copy(tails[0].kv.begin(), tails[0].kv.end(), p);
    std::copy(tails[0].score.begin(), tails[0].score.end(), p + 2 * kDim);
  }
  DeviceBuffer state_d = upload(state0, st);

  Stats swa_st, chunk_st, comp1_st, comp2_st, idx1_st, idx2_st;
  std::vector<int64_t> next_pos(kSeqs, 0);
  int step = 0;
  for (const auto& chunks : schedule()) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Batch b = make_batch(chunks, next_pos, rng);
    const auto rows = static_cast<int64_t>(b.seq.size());
    const auto nrows = static_cast<size_t>(rows);
    const bool bf2 = step % 2 == 1;  // ratio-2 inputs alternate fp32 / bf16 across the carry
    const auto xa = make_rows(nrows, 3000 + 10 * step, false);
    const auto xb = make_rows(nrows, 3001 + 10 * step, true);
    const auto x1 = make_rows(nrows, 3002 + 10 * step, step % 3 == 2);
    const auto kv2 = make_rows(nrows, 3003 + 10 * step, bf2);
    const auto score2 = make_rows(nrows, 3004 + 10 * step, bf2);
    const DeviceBuffer seq_d = upload(b.seq, st), pos_d = upload(b.pos, st);
    const DeviceBuffer end_d = upload(b.seq_end, st);
    const DeviceBuffer xa_d = upload_act(xa, false, st), xb_d = upload_act(xb, true, st);
    const DeviceBuffer x1_d = upload_act(x1, step % 3 == 2, st);
    const DeviceBuffer kv2_d = upload_act(kv2, bf2, st), score2_d = upload_act(score2, bf2, st);
    const size_t swa_bytes = static_cast<size_t>(swa_entry_bytes(kDim));
    DeviceBuffer chunk_d = poisoned<uint8_t>(nrows * swa_bytes, st);
    DeviceBuffer latent1_d = poisoned<float>(nrows * kDim, st);

    for (int call = 0; call < 3; ++call) {
      SwaWriteParams p;
      p.x = call < 2 ? xa_d.data() : xb_d.data();
      p.norm_weight = (call < 2 ? kv_norm_a_d : kv_norm_b_d).as<float>();
      p.freqs = (call < 2 ? plain_d : yarn_d).as<float>();
      p.seq = seq_d.as<int32_t>();
      p.positions = pos_d.as<int64_t>();
      p.seq_end = end_d.as<int64_t>();
      p.table = call == 0 ? PagedTable{} : swa.device();
      p.chunk_entries = call == 0 ? chunk_d.as<uint8_t>() : nullptr;
      p.write_ring = call != 0;
      p.rows = rows;
      p.ring_block = call == 2 ? 2 : 0;
      p.window = kWindow;
      p.eps = static_cast<float>(kEps);
      p.precision = call < 2 ? ActPrecision::kF32 : ActPrecision::kBF16;
      p.dim = kDim;
      p.rope_dim = kRope;
      swa_write(p, st);
    }
    {
      CompressRatio1Params p;
      p.x = x1_d.data();
      p.norm_weight = comp_norm1_d.as<float>();
      p.freqs = yarn_d.as<float>();
      p.seq = seq_d.as<int32_t>();
      p.positions = pos_d.as<int64_t>();
      p.latent = latent1_d.as<float>();
      p.table = comp1.device();
      p.rows = rows;
      p.eps = static_cast<float>(kEps);
      p.precision = step % 3 == 2 ? ActPrecision::kBF16 : ActPrecision::kF32;
      p.dim = kDim;
      p.rope_dim = kRope;
      compress_ratio1(p, st);
      IndexKeyParams k;
      k.latent = latent1_d.as<float>();
      k.wk = wk1_d.as<uint16_t>();
      k.norm_weight = k_norm1_d.as<float>();
      k.freqs = yarn_d.as<float>();
      k.seq = seq_d.as<int32_t>();
      k.group = pos_d.as<int64_t>();
      k.table = idx1.device();
      k.groups = rows;
      k.ratio = 1;
      k.eps = static_cast<float>(kEps);
      k.latent_dim = kDim;
      k.dim = kIdxDim;
      k.rope_dim = kRope;
      index_key_write(k, st);
    }
    const CompressorPlan plan2 = plan_compressor(2, b.seq, b.pos, state_rows);
    const DeviceBuffer work_d = upload(plan2.work, st);
    const DeviceBuffer gseq_d = upload(plan2.group_seq, st), gidx_d = upload(plan2.group_index, st);
    DeviceBuffer latent2_d = poisoned<float>(static_cast<size_t>(plan2.groups()) * kDim, st);
    {
      CompressRatio2Params p;
      p.kv = kv2_d.data();
      p.score = score2_d.data();
      p.norm_weight = comp_norm2_d.as<float>();
      p.freqs = yarn_d.as<float>();
      p.work = work_d.as<Ratio2Work>();
      p.state = state_d.as<float>();
      p.latent = latent2_d.as<float>();
      p.table = comp2.device();
      p.works = static_cast<int64_t>(plan2.work.size());
      p.eps = static_cast<float>(kEps);
      p.precision = bf2 ? ActPrecision::kBF16 : ActPrecision::kF32;
      p.dim = kDim;
      p.rope_dim = kRope;
      compress_ratio2(p, st);
      IndexKeyParams k;
      k.latent = latent2_d.as<float>();
      k.wk = wk2_d.as<uint16_t>();
      k.norm_weight = k_norm2_d.as<float>();
      k.freqs = yarn_d.as<float>();
      k.seq = gseq_d.as<int32_t>();
      k.group = gidx_d.as<int64_t>();
      k.table = idx2.device();
      k.groups = plan2.groups();
      k.ratio = 2;
      k.eps = static_cast<float>(kEps);
      k.latent_dim = kDim;
      k.dim = kIdxDim;
      k.rope_dim = kRope;
      index_key_write(k, st);
    }

    // CPU reference, rows in (sequence, position) order.
    std::vector<uint8_t> chunk_want(nrows * swa_bytes);
    std::map<std::pair<int32_t, int64_t>, std::vector<float>> latent2_want;
    std::vector<std::vector<float>> latent1_want(nrows);
    std::vector<float> latent;
    for (size_t r : cpu_order(b)) {
      const int32_t s = b.seq[r];
      const int64_t pos = b.pos[r];
      const auto ea = pack(Format::kSwa, ref_window(xa.data() + r * kDim, kv_norm_a, plain, pos));
      std::copy(ea.begin(), ea.end(),
                chunk_want.begin() + static_cast<std::ptrdiff_t>(r * swa_bytes));
      if (pos >= b.seq_end[static_cast<size_t>(s)] - kWindow) {
        swa.expect(s, 0 * kWindow + pos % kWindow, ea);
        swa.expect(s, 2 * kWindow + pos % kWindow,
                   pack(Format::kSwa, ref_window(xb.data() + r * kDim, kv_norm_b, yarn, pos)));
      }
      std::vector<float> l1(x1.begin() + static_cast<std::ptrdiff_t>(r * kDim),
                            x1.begin() + static_cast<std::ptrdiff_t>((r + 1) * kDim));
      cpu::rms_norm<float>(l1.data(), 1, kDim, comp_norm1.data(), kEps);
      comp1.expect(s, pos, pack(Format::kComp, ref_comp(l1, yarn, pos)));
      idx1.expect(s, pos, pack(Format::kIndex, ref_index_key(l1, wk1_ref, k_norm1, yarn, pos)));
      latent1_want[r] = l1;
      if (ref_ratio2_row(tails[static_cast<size_t>(s)], kv2.data() + r * kDim,
                         score2.data() + r * kDim, pos, comp_norm2, latent)) {
        const int64_t g = pos / 2;
        comp2.expect(s, g, pack(Format::kComp, ref_comp(latent, yarn, 2 * g)));
        idx2.expect(s, g,
                    pack(Format::kIndex, ref_index_key(latent, wk2_ref, k_norm2, yarn, 2 * g)));
        latent2_want[{s, g}] = latent;
      }
    }
    const std::vector<float> latent1 = download<float>(latent1_d, nrows * kDim, st);
    for (size_t r = 0; r < nrows; ++r) {
      for (size_t d = 0; d < kDim; ++d) {
        ASSERT_EQ(float_bits(latent1[r * kDim + d]), float_bits(latent1_want[r][d]))
            << "ratio-1 latent row " << r << " value " << d;
      }
    }
    const std::vector<float> latent2 =
        download<float>(latent2_d, static_cast<size_t>(plan2.groups()) * kDim, st);
    ASSERT_EQ(static_cast<size_t>(plan2.groups()), latent2_want.size());
    for (size_t g = 0; g < latent2_want.size(); ++g) {
      const auto& want = latent2_want.at({plan2.group_seq[g], plan2.group_index[g]});
      for (size_t d = 0; d < kDim; ++d) {
        const float got = latent2[g * kDim + d];
        ASSERT_LE(std::fabs(static_cast<double>(got) - want[d]), 1e-5 * (std::fabs(want[d]) + 1.0))
            << "ratio-2 latent of group " << plan2.group_index[g] << " value " << d;
      }
    }
    const std::vector<float> state = download<float>(state_d, state0.size(), st);
    for (int32_t s = 0; s < kSeqs; ++s) {
      const float* p = state.data() + state_rows[static_cast<size_t>(s)] * state_floats;
      const Tail& t = tails[static_cast<size_t>(s)];
      for (size_t i = 0; i < t.kv.size(); ++i) {
        ASSERT_EQ(float_bits(p[i]), float_bits(t.kv[i])) << "state kv of seq " << s << " at " << i;
        ASSERT_EQ(float_bits(p[2 * kDim + i]), float_bits(t.score[i]))
            << "state score of seq " << s << " at " << i;
      }
    }
    {
      const std::vector<uint8_t> got = download<uint8_t>(chunk_d, chunk_want.size(), st);
      for (size_t r = 0; r < nrows; ++r) {
        compare_entry(Format::kSwa, std::span<const uint8_t>(got.data() + r * swa_bytes, swa_bytes),
                      std::span<const uint8_t>(chunk_want.data() + r * swa_bytes, swa_bytes),
                      chunk_st, "chunk entry of row " + std::to_string(r));
        ASSERT_FALSE(HasFatalFailure());
      }
    }
    swa.check("swa", st, swa_st);
    comp1.check("comp ratio 1", st, comp1_st);
    comp2.check("comp ratio 2", st, comp2_st);
    idx1.check("index keys ratio 1", st, idx1_st);
    idx2.check("index keys ratio 2", st, idx2_st);
    if (HasFatalFailure()) return;
    ++step;
  }
  const std::pair<const char*, const Stats*> all[] = {
      {"swa", &swa_st},           {"swa_chunk", &chunk_st},   {"comp_ratio1", &comp1_st},
      {"comp_ratio2", &comp2_st}, {"index_ratio1", &idx1_st}, {"index_ratio2", &idx2_st}};
  for (const auto& [name, s] : all) {
    ASSERT_GT(s->bytes, 0) << name;
    const double fraction = static_cast<double>(s->identical) / static_cast<double>(s->bytes);
    EXPECT_GE(fraction, 0.999) << name << ": " << s->identical << " of " << s->bytes
                               << " bytes identical";
    std::fprintf(stderr, "[kv_write generic] %-13s %lld / %lld bytes identical\n", name,
                 static_cast<long long>(s->identical), static_cast<long long>(s->bytes));
  }
}

}  // namespace
}  // namespace di::kv_write_generic_test
