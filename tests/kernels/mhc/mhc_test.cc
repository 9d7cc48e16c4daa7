// Fused mHC kernels (kernels/cuda/mhc) against the CPU references (kernels/cpu/mhc.h), evaluated in
// double on the same (storage-rounded) inputs, at real dims; plus row-level batch invariance.

#include "kernels/cpu/mhc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "kernels/cuda/mhc/mhc.cuh"

namespace di {
namespace {

constexpr int kHc = kMhcStreams;
constexpr int kMix = kMhcMixes;
constexpr double kNormEps = 1e-20;
constexpr double kHcEps = 1e-6;
constexpr int kIters = 20;

// fp32 values exactly representable in the storage type (so CPU and GPU see the same inputs).
std::vector<float> random_values(size_t n, uint64_t seed, float sigma, MhcStorage st) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (st == MhcStorage::kBf16) x = bf16_to_float(bf16_from_float(x));
  }
  return v;
}

// Host bytes of `v` in the storage type.
std::vector<uint8_t> to_storage(const std::vector<float>& v, MhcStorage st) {
  if (st == MhcStorage::kF32) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = bf16_from_float(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

std::vector<float> from_storage(const std::vector<uint8_t>& b, MhcStorage st) {
  if (st == MhcStorage::kF32) {
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  }
  std::vector<float> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    v[i] = bf16_to_float(h);
  }
  return v;
}

struct Site {
  std::vector<float> fn, scale, base;
  std::vector<uint32_t> packed;
};

Site random_site(int64_t dim, uint64_t seed) {
  Site s;
  // fn ~ N(0, 0.01): the mixes of a unit-rms row are O(1), so sigmoid and softmax are not
  // saturated.
  s.fn = random_values(static_cast<size_t>(kMix * kHc * dim), seed, 0.01f, MhcStorage::kF32);
  s.packed.resize(mhc_fn_packed_words(dim));
  mhc_pack_fn(s.fn.data(), dim, s.packed.data());
  s.scale = {0.8f, 0.6f, 1.3f};
  s.base = random_values(kMix, seed + 1, 0.7f, MhcStorage::kF32);
  return s;
}

// mhc_collapse of `stream` [tokens, 4, dim] with the weights `pre` [tokens, 4] into `out`.
void collapse(const void* stream, const float* pre, int64_t tokens, int64_t dim, MhcStorage st,
              void* out, cudaStream_t s) {
  MhcCollapseParams c;
  c.stream = stream;
  c.pre = pre;
  c.tokens = tokens;
  c.dim = dim;
  c.storage = st;
  c.out = out;
  mhc_collapse(c, s);
}

struct PreOut {
  std::vector<float> collapsed, pre, post, comb;
};

class MhcCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU parity test skipped";
  }

 public:
  // Runs mhc_pre on poisoned outputs (0xFF bytes: NaN in fp32 and bf16).
  static PreOut run_pre(const Site& site, const std::vector<float>& x,
                        const std::vector<float>& carried, int64_t tokens, int64_t dim,
                        MhcStorage st, int stages = 0, MhcPreGrid grid = MhcPreGrid::kPersistent,
                        MhcPreTile tile = MhcPreTile::kAuto,
                        std::optional<MhcFinalizeOrder> split = std::nullopt) {
    Stream stream;
    const size_t es = st == MhcStorage::kF32 ? 4 : 2;
    const auto xs = to_storage(x, st);
    DeviceBuffer xd(xs.size(), "x"), fd(site.packed.size() * 4, "fn"), sd(12, "scale"),
        bd(kMix * 4, "base"), cd(carried.size() * 4, "carried");
    DeviceBuffer od(static_cast<size_t>(tokens * dim) * es, "collapsed");
    DeviceBuffer pd(static_cast<size_t>(tokens * kHc) * 4, "pre"),
        qd(static_cast<size_t>(tokens * kHc) * 4, "post"),
        md(static_cast<size_t>(tokens * kHc * kHc) * 4, "comb");
    DeviceBuffer wd(mhc_pre_workspace_bytes(tokens, dim), "workspace");
    xd.copy_from_host_async(xs.data(), xs.size(), stream.get());
    fd.copy_from_host_async(site.packed.data(), fd.size(), stream.get());
    sd.copy_from_host_async(site.scale.data(), 12, stream.get());
    bd.copy_from_host_async(site.base.data(), kMix * 4, stream.get());
    cd.copy_from_host_async(carried.data(), cd.size(), stream.get());
    for (DeviceBuffer* b : {&od, &pd, &qd, &md, &wd})
      b->fill_async(0xFF, stream.get());
    MhcPreParams p;
    p.stream = xd.data();
    p.fn_packed = fd.as<uint32_t>();
    p.scale = sd.as<float>();
    p.base = bd.as<float>();
    p.carried_pre = cd.as<float>();
    p.tokens = tokens;
    p.dim = dim;
    p.storage = st;
    p.norm_eps = static_cast<float>(kNormEps);
    p.hc_eps = static_cast<float>(kHcEps);
    p.sinkhorn_iters = kIters;
    p.collapsed = od.data();
    p.pre = pd.as<float>();
    p.post = qd.as<float>();
    p.comb = md.as<float>();
    p.workspace = wd.as<float>();
    if (split) {
      // The pass, a kernel that waits for it (a collapse of the stream into a buffer nothing
      // else reads), then the finalize.
      mhc_pre_pass(p, stream.get());
      DeviceBuffer other(static_cast<size_t>(tokens * dim) * es, "other");
      collapse(xd.data(), cd.as<float>(), tokens, dim, st, other.data(), stream.get());
      mhc_pre_finalize(p, stream.get(), *split);
      stream.synchronize();
    } else if (stages == 0) {
      mhc_pre(p, stream.get());
    } else {
      mhc_pre_with_config(p, stages, grid, stream.get(), tile);
    }
    PreOut o;
    std::vector<uint8_t> ob(od.size());
    o.pre.resize(pd.size() / 4);
    o.post.resize(qd.size() / 4);
    o.comb.resize(md.size() / 4);
    od.copy_to_host_async(ob.data(), ob.size(), stream.get());
    pd.copy_to_host_async(o.pre.data(), pd.size(), stream.get());
    qd.copy_to_host_async(o.post.data(), qd.size(), stream.get());
    md.copy_to_host_async(o.comb.data(), md.size(), stream.get());
    stream.synchronize();
    o.collapsed = from_storage(ob, st);
    return o;
  }

  static std::vector<float> run_post(const std::vector<float>& y, const std::vector<float>& x,
                                     const std::vector<float>& post, const std::vector<float>& comb,
                                     int64_t tokens, int64_t dim, MhcStorage st) {
    Stream stream;
    const auto ys = to_storage(y, st), xs = to_storage(x, st);
    DeviceBuffer yd(ys.size(), "y"), xd(xs.size(), "x"), od(xs.size(), "out"),
        pd(post.size() * 4, "post"), cd(comb.size() * 4, "comb");
    yd.copy_from_host_async(ys.data(), ys.size(), stream.get());
    xd.copy_from_host_async(xs.data(), xs.size(), stream.get());
    pd.copy_from_host_async(post.data(), pd.size(), stream.get());
    cd.copy_from_host_async(comb.data(), cd.size(), stream.get());
    od.fill_async(0xFF, stream.get());
    MhcPostParams p;
    p.y = yd.data();
    p.stream_in = xd.data();
    p.post = pd.as<float>();
    p.comb = cd.as<float>();
    p.tokens = tokens;
    p.dim = dim;
    p.storage = st;
    p.stream_out = od.data();
    mhc_post(p, stream.get());
    std::vector<uint8_t> ob(od.size());
    od.copy_to_host_async(ob.data(), ob.size(), stream.get());
    stream.synchronize();
    return from_storage(ob, st);
  }
};

std::vector<double> to_double(const float* p, size_t n) {
  return std::vector<double>(p, p + n);
}

// Tolerance of a stored value against the double reference: fp32 reduction-order error relative to
// the sum of |terms|, plus the storage rounding (bf16: 2^-8 relative).
double value_tol(double ref, double abs_terms, MhcStorage st) {
  const double red = 4e-6 * abs_terms + 1e-30;
  return st == MhcStorage::kF32 ? red : red + std::ldexp(std::fabs(ref), -8) * 1.001;
}

void check_pre(int64_t tokens, int64_t dim, MhcStorage st, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "T=" << tokens << " D=" << dim
                                    << " storage=" << (st == MhcStorage::kF32 ? "fp32" : "bf16"));
  const Site site = random_site(dim, seed);
  const auto x = random_values(static_cast<size_t>(tokens * kHc * dim), seed + 7, 1.0f, st);
  std::vector<float> carried(static_cast<size_t>(tokens * kHc));
  std::mt19937_64 rng(seed + 9);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (auto& c : carried)
    c = u(rng);
  const PreOut o = MhcCudaTest::run_pre(site, x, carried, tokens, dim, st);

  const auto fn_d = to_double(site.fn.data(), site.fn.size());
  const auto sc_d = to_double(site.scale.data(), 3), base_d = to_double(site.base.data(), kMix);
  double err_pre = 0, err_post = 0, err_comb = 0, worst_col = 0;
  int64_t bad = 0;
  std::vector<double> pre(kHc), post(kHc), comb(kHc * kHc), col(static_cast<size_t>(dim));
  for (int64_t t = 0; t < tokens; ++t) {
    const auto xr = to_double(x.data() + t * kHc * dim, static_cast<size_t>(kHc * dim));
    const auto cr = to_double(carried.data() + t * kHc, kHc);
    cpu::hc_mixes(xr.data(), kHc, dim, fn_d.data(), sc_d.data(), base_d.data(), kNormEps, kIters,
                  kHcEps, pre.data(), post.data(), comb.data());
    cpu::hc_collapse(xr.data(), kHc, dim, cr.data(), col.data());
    for (int j = 0; j < kHc; ++j) {
      err_pre = std::max(err_pre, std::fabs(o.pre[t * kHc + j] - pre[j]));
      err_post = std::max(err_post, std::fabs(o.post[t * kHc + j] - post[j]));
      if (!std::isfinite(o.pre[t * kHc + j]) || !std::isfinite(o.post[t * kHc + j])) ++bad;
    }
    for (int i = 0; i < kHc * kHc; ++i) {
      err_comb = std::max(err_comb, std::fabs(o.comb[t * kHc * kHc + i] - comb[i]));
      if (!std::isfinite(o.comb[t * kHc * kHc + i])) ++bad;
    }
    for (int64_t d = 0; d < dim; ++d) {
      double terms = 0;
      for (int j = 0; j < kHc; ++j)
        terms += std::fabs(cr[j] * xr[j * dim + d]);
      const double got = o.collapsed[t * dim + d];
      const double e = std::fabs(got - col[d]);
      if (!(e <= value_tol(col[d], terms, st))) ++bad;
      worst_col = std::max(worst_col, e / (terms + 1e-30));
    }
  }
  // Mixes: fp32 dot products of 4 * dim terms and a 20-step Sinkhorn; errors stay at ~1e-6.
  EXPECT_LE(err_pre, 2e-5);
  EXPECT_LE(err_post, 4e-5);
  EXPECT_LE(err_comb, 2e-5);
  EXPECT_EQ(bad, 0) << "collapsed values out of tolerance or unwritten (worst rel " << worst_col
                    << ")";
  std::printf(
      "pre  T=%-5lld D=%-5lld %s: max|err| pre %.2e post %.2e comb %.2e collapsed/|terms| %.2e\n",
      static_cast<long long>(tokens), static_cast<long long>(dim),
      st == MhcStorage::kF32 ? "fp32" : "bf16", err_pre, err_post, err_comb, worst_col);
}

void check_post(int64_t tokens, int64_t dim, MhcStorage st, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "T=" << tokens << " D=" << dim);
  const auto x = random_values(static_cast<size_t>(tokens * kHc * dim), seed, 1.0f, st);
  const auto y = random_values(static_cast<size_t>(tokens * dim), seed + 1, 1.0f, st);
  std::mt19937_64 rng(seed + 2);
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  std::vector<float> post(static_cast<size_t>(tokens * kHc)), comb(post.size() * kHc);
  for (auto& v : post)
    v = u(rng);
  for (auto& v : comb)
    v = u(rng) * 0.5f;
  const auto out = MhcCudaTest::run_post(y, x, post, comb, tokens, dim, st);
  int64_t bad = 0;
  std::vector<double> ref(static_cast<size_t>(kHc * dim));
  for (int64_t t = 0; t < tokens; ++t) {
    const auto xr = to_double(x.data() + t * kHc * dim, static_cast<size_t>(kHc * dim));
    const auto yr = to_double(y.data() + t * dim, static_cast<size_t>(dim));
    const auto pr = to_double(post.data() + t * kHc, kHc);
    const auto cr = to_double(comb.data() + t * kHc * kHc, kHc * kHc);
    cpu::hc_expand(yr.data(), xr.data(), kHc, dim, pr.data(), cr.data(), ref.data());
    for (int k = 0; k < kHc; ++k) {
      for (int64_t d = 0; d < dim; ++d) {
        double terms = std::fabs(pr[k] * yr[d]);
        for (int j = 0; j < kHc; ++j)
          terms += std::fabs(cr[j * kHc + k] * xr[j * dim + d]);
        const double r = ref[k * dim + d];
        const double got = out[(t * kHc + k) * dim + d];
        if (!(std::fabs(got - r) <= value_tol(r, terms, st))) ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "expand values out of tolerance or unwritten";
}

TEST_F(MhcCudaTest, PreMatchesCpuAtV41Dims) {
  for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
    for (int64_t t : {1, 7, 64, 1000, 4096})
      check_pre(t, 5120, st, 100 + static_cast<uint64_t>(t));
  }
}

TEST_F(MhcCudaTest, PreMatchesCpuAtOtherDims) {
  for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
    check_pre(65, 4096, st, 11);  // V4-Flash
    check_pre(33, 256, st, 12);
    check_pre(5, 64, st, 13);
  }
}

TEST_F(MhcCudaTest, PostMatchesCpu) {
  for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
    for (int64_t t : {1, 7, 64, 1000})
      check_post(t, 5120, st, 200 + static_cast<uint64_t>(t));
    check_post(3, 4096, st, 5);
    check_post(9, 136, st, 6);
  }
}

// The collapse alone (the head's input): fp32 storage bitwise cpu::hc_collapse<float>; bf16
// storage the bf16 rounding (RNE) of that fp32 result.
TEST_F(MhcCudaTest, CollapseMatchesCpuBitwise) {
  for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
    for (const auto& [tokens, dim] : {std::pair<int64_t, int64_t>{1, 5120}, {37, 5120}, {5, 192}}) {
      const auto x = random_values(static_cast<size_t>(tokens * kHc * dim), 40 + dim, 1.0f, st);
      std::mt19937_64 rng(static_cast<uint64_t>(tokens));
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      std::vector<float> pre(static_cast<size_t>(tokens * kHc));
      for (auto& v : pre)
        v = u(rng);
      Stream stream;
      const auto xs = to_storage(x, st);
      const size_t out_bytes = static_cast<size_t>(tokens * dim) * (st == MhcStorage::kF32 ? 4 : 2);
      DeviceBuffer xd(xs.size(), "x"), pd(pre.size() * 4, "pre"), od(out_bytes, "out");
      xd.copy_from_host_async(xs.data(), xs.size(), stream.get());
      pd.copy_from_host_async(pre.data(), pd.size(), stream.get());
      od.fill_async(0xFF, stream.get());
      collapse(xd.data(), pd.as<float>(), tokens, dim, st, od.data(), stream.get());
      std::vector<uint8_t> ob(out_bytes);
      od.copy_to_host_async(ob.data(), ob.size(), stream.get());
      stream.synchronize();
      const auto got = from_storage(ob, st);
      int64_t bad = 0;
      std::vector<float> ref(static_cast<size_t>(dim));
      for (int64_t t = 0; t < tokens; ++t) {
        cpu::hc_collapse(x.data() + t * kHc * dim, kHc, dim, pre.data() + t * kHc, ref.data());
        for (int64_t d = 0; d < dim; ++d) {
          float want = ref[static_cast<size_t>(d)];
          if (st == MhcStorage::kBf16) want = bf16_to_float(bf16_from_float(want));
          const float g = got[static_cast<size_t>(t * dim + d)];
          bad += std::memcmp(&g, &want, 4) != 0;
        }
      }
      EXPECT_EQ(bad, 0) << "T=" << tokens << " D=" << dim;
    }
  }
}

// A row's outputs are bitwise identical whatever T is and wherever the row sits in a tile.
TEST_F(MhcCudaTest, BatchInvariantRows) {
  const int64_t dim = 5120, big = 1000;
  for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
    const Site site = random_site(dim, 77);
    const auto x = random_values(static_cast<size_t>(big * kHc * dim), 78, 1.0f, st);
    std::vector<float> carried(static_cast<size_t>(big * kHc));
    std::mt19937_64 rng(79);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (auto& c : carried)
      c = u(rng);
    const PreOut all = run_pre(site, x, carried, big, dim, st);
    std::vector<float> y(static_cast<size_t>(big * dim));
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = all.collapsed[i] * 0.5f;  // any block output
    const auto all_post = run_post(y, x, all.post, all.comb, big, dim, st);
    // (first row, count): sub-batches that move rows to other tile positions.
    for (const auto& [first, count] :
         std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {500, 1}, {3, 7}, {37, 64}, {0, 1000}}) {
      SCOPED_TRACE(::testing::Message() << "rows " << first << "+" << count);
      auto slice = [&](const std::vector<float>& v, int64_t per_row) {
        return std::vector<float>(v.begin() + first * per_row,
                                  v.begin() + (first + count) * per_row);
      };
      const PreOut sub = run_pre(site, slice(x, kHc * dim), slice(carried, kHc), count, dim, st);
      EXPECT_EQ(0, std::memcmp(sub.collapsed.data(), slice(all.collapsed, dim).data(),
                               sub.collapsed.size() * 4));
      EXPECT_EQ(0, std::memcmp(sub.pre.data(), slice(all.pre, kHc).data(), sub.pre.size() * 4));
      EXPECT_EQ(0, std::memcmp(sub.post.data(), slice(all.post, kHc).data(), sub.post.size() * 4));
      EXPECT_EQ(
          0, std::memcmp(sub.comb.data(), slice(all.comb, kHc * kHc).data(), sub.comb.size() * 4));
      const auto sub_post = run_post(slice(y, dim), slice(x, kHc * dim), slice(all.post, kHc),
                                     slice(all.comb, kHc * kHc), count, dim, st);
      EXPECT_EQ(
          0, std::memcmp(sub_post.data(), slice(all_post, kHc * dim).data(), sub_post.size() * 4));
    }
  }
}

// Both pipeline depths, both grids (persistent: a CTA walks several items; per item) and both
// token tiles (large: fn from global memory; small: fn staged with the rows) compute the same
// function in the same order: bitwise equal outputs. T is large enough that the persistent grid
// is smaller than the item count for both storages and tiles.
TEST_F(MhcCudaTest, PipelineDepthsGridsAndTilesAgreeBitwise) {
  const int64_t dim = 5120, tokens = 3000;
  for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
    const Site site = random_site(dim, 91);
    const auto x = random_values(static_cast<size_t>(tokens * kHc * dim), 92, 1.0f, st);
    std::vector<float> carried(static_cast<size_t>(tokens * kHc), 0.3f);
    const PreOut a =
        run_pre(site, x, carried, tokens, dim, st, 2, MhcPreGrid::kPersistent, MhcPreTile::kLarge);
    for (MhcPreTile tile : {MhcPreTile::kLarge, MhcPreTile::kSmall}) {
      for (int stages : {2, 3}) {
        for (MhcPreGrid grid : {MhcPreGrid::kPersistent, MhcPreGrid::kPerItem}) {
          if (tile == MhcPreTile::kLarge && stages == 2 && grid == MhcPreGrid::kPersistent) {
            continue;
          }
          const PreOut b = run_pre(site, x, carried, tokens, dim, st, stages, grid, tile);
          SCOPED_TRACE(testing::Message()
                       << "small tile " << (tile == MhcPreTile::kSmall) << " stages " << stages
                       << " per-item " << (grid == MhcPreGrid::kPerItem));
          EXPECT_EQ(0, std::memcmp(a.collapsed.data(), b.collapsed.data(), a.collapsed.size() * 4));
          EXPECT_EQ(0, std::memcmp(a.pre.data(), b.pre.data(), a.pre.size() * 4));
          EXPECT_EQ(0, std::memcmp(a.post.data(), b.post.data(), a.post.size() * 4));
          EXPECT_EQ(0, std::memcmp(a.comb.data(), b.comb.data(), a.comb.size() * 4));
        }
      }
    }
  }
}

// The decode pass (a CTA per split and 16-d block, a warp per n-tile of mixes) gives bitwise the
// outputs of the small-tile partial kernel, for every decode token count and several dims
// (V4.1, V4, one chunk per split, one split).
TEST_F(MhcCudaTest, DecodePassIsBitwiseTheTiledPass) {
  for (int64_t dim : {5120, 4096, 256, 64}) {
    for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
      for (int64_t tokens : {1, 5, 16}) {
        const Site site = random_site(dim, 300 + static_cast<uint64_t>(dim));
        const auto x = random_values(static_cast<size_t>(tokens * kHc * dim), 301, 1.0f, st);
        const auto carried =
            random_values(static_cast<size_t>(tokens * kHc), 302, 0.5f, MhcStorage::kF32);
        const PreOut a = run_pre(site, x, carried, tokens, dim, st, 2, MhcPreGrid::kPersistent,
                                 MhcPreTile::kSmall);
        const PreOut b = run_pre(site, x, carried, tokens, dim, st, 2, MhcPreGrid::kPersistent,
                                 MhcPreTile::kDecode);
        SCOPED_TRACE(testing::Message() << "dim " << dim << " tokens " << tokens << " bf16 "
                                        << (st == MhcStorage::kBf16));
        EXPECT_EQ(0, std::memcmp(a.collapsed.data(), b.collapsed.data(), a.collapsed.size() * 4));
        EXPECT_EQ(0, std::memcmp(a.pre.data(), b.pre.data(), a.pre.size() * 4));
        EXPECT_EQ(0, std::memcmp(a.post.data(), b.post.data(), a.post.size() * 4));
        EXPECT_EQ(0, std::memcmp(a.comb.data(), b.comb.data(), a.comb.size() * 4));
        EXPECT_FALSE(std::isnan(b.comb[0]));  // written (the outputs start as NaN)
      }
    }
  }
}

// The pre side split around another kernel (mhc_pre_pass, a kernel that waits for the pass,
// mhc_pre_finalize beside it): bitwise mhc_pre, with either finalize order.
TEST_F(MhcCudaTest, FinalizeBesideTheNextKernelIsBitwiseMhcPre) {
  const int64_t dim = 5120;
  for (MhcStorage st : {MhcStorage::kF32, MhcStorage::kBf16}) {
    for (int64_t tokens : {1, 9, 100}) {
      for (MhcFinalizeOrder order :
           {MhcFinalizeOrder::kAfterPass, MhcFinalizeOrder::kBesidePrevious}) {
        SCOPED_TRACE(testing::Message()
                     << "tokens " << tokens << " bf16 " << (st == MhcStorage::kBf16) << " beside "
                     << (order == MhcFinalizeOrder::kBesidePrevious));
        const Site site = random_site(dim, 700);
        const auto x = random_values(static_cast<size_t>(tokens * kHc * dim), 701, 1.0f, st);
        const auto carried =
            random_values(static_cast<size_t>(tokens * kHc), 702, 0.5f, MhcStorage::kF32);
        const PreOut a = run_pre(site, x, carried, tokens, dim, st);
        const PreOut b = run_pre(site, x, carried, tokens, dim, st, 0, MhcPreGrid::kPersistent,
                                 MhcPreTile::kAuto, order);
        EXPECT_EQ(0, std::memcmp(a.collapsed.data(), b.collapsed.data(), a.collapsed.size() * 4));
        EXPECT_EQ(0, std::memcmp(a.pre.data(), b.pre.data(), a.pre.size() * 4));
        EXPECT_EQ(0, std::memcmp(a.post.data(), b.post.data(), a.post.size() * 4));
        EXPECT_EQ(0, std::memcmp(a.comb.data(), b.comb.data(), a.comb.size() * 4));
        EXPECT_FALSE(std::isnan(b.comb[0]));
      }
    }
  }
}

}  // namespace
}  // namespace di
