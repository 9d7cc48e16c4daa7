// Routed-expert FFN pieces on the GPU against the CPU reference at V4.1 sizes (384 experts,
// top-6, dim 5120, moe_intermediate 2304) and at the fixtures' tiny sizes: the tile list, the
// grouped FP4 GEMM (w1/w3 with the token gather, w2 over the pairs; fp32 and bf16 output) against
// a double-precision dot product of the exactly decoded FP4 weights (cpu::decode_rows) and
// e4m3 activations, row-level batch invariance, the SwiGLU + routing weight + act_quant against
// the CPU arithmetic of Model::expert followed by cpu::act_quant_e4m3, and launcher errors.

#include "kernels/cuda/moe/moe_expert.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/error.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/moe/moe_route.cuh"
#include "moe_test_routing.h"

namespace di::moe_expert_test {
namespace {

using dense_test::download;
using dense_test::from_bf16;
using dense_test::poisoned;
using dense_test::random_normal;
using dense_test::to_bf16;
using dense_test::upload;
using moe_test::random_ids;
using moe_test::route;
using moe_test::Routing;

constexpr int32_t kE = 384;
constexpr int32_t kTopk = 6;
constexpr int64_t kDim = 5120;
constexpr int64_t kInter = 2304;

// One FP4 expert matrix: checkpoint bytes on the host and the device, and its exact decode.
struct Fp4Matrix {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> codes, scales;
  std::vector<float> dec;  // [n, k]
  DeviceBuffer d_codes, d_scales;
};

// The checkpoint's row-major codes [n, k / 2] in the GPU's tiled order.
std::vector<uint8_t> tiled_codes(const std::vector<uint8_t>& codes, int64_t n, int64_t k) {
  std::vector<uint8_t> out(static_cast<size_t>(fp4_expert_codes_bytes(n, k)));
  pack_fp4_expert_codes(codes.data(), n, k, out.data());
  return out;
}

Fp4Matrix random_fp4(int64_t n, int64_t k, uint64_t seed, cudaStream_t st) {
  std::mt19937_64 rng(seed);
  Fp4Matrix m;
  m.n = n;
  m.k = k;
  m.codes.resize(static_cast<size_t>(n * k / 2));
  m.scales.resize(static_cast<size_t>(n * k / 32));
  for (auto& b : m.codes)
    b = static_cast<uint8_t>(rng());
  for (auto& s : m.scales)
    s = static_cast<uint8_t>(116 + rng() % 9);
  const cpu::WeightRef ref =
      cpu::fp4_row_weight(ConstTensorView{reinterpret_cast<const std::byte*>(m.codes.data()),
                                          DType::kI8, Shape{n, k / 2}},
                          ConstTensorView{reinterpret_cast<const std::byte*>(m.scales.data()),
                                          DType::kF8E8M0, Shape{n, k / 32}},
                          "expert");
  m.dec.resize(static_cast<size_t>(n * k));
  cpu::decode_rows(ref, 0, n, m.dec.data());
  m.d_codes = upload(tiled_codes(m.codes, n, k), st, "fp4 codes");
  m.d_scales = upload(m.scales, st, "fp4 scales");
  return m;
}

// Host copy of moe_interleave_act: per 32-block the even elements, then the odd ones.
std::vector<uint8_t> interleaved(const std::vector<uint8_t>& v) {
  std::vector<uint8_t> out(v.size());
  for (size_t b = 0; b < v.size(); b += 32)
    for (size_t i = 0; i < 16; ++i) {
      out[b + i] = v[b + 2 * i];
      out[b + 16 + i] = v[b + 2 * i + 1];
    }
  return out;
}

// e4m3 activations (any finite code, UE8M0 scales per 32) and their values; the device copy is
// in the expert GEMM's interleaved order.
struct Act {
  int64_t rows = 0, k = 0;
  std::vector<uint8_t> codes, scales;
  std::vector<float> val;
  DeviceBuffer d_codes, d_scales;
};

Act random_act(int64_t rows, int64_t k, uint64_t seed, cudaStream_t st) {
  std::mt19937_64 rng(seed);
  Act a;
  a.rows = rows;
  a.k = k;
  a.codes.resize(static_cast<size_t>(rows * k));
  a.scales.resize(static_cast<size_t>(rows * k / 32));
  for (auto& c : a.codes) {
    c = static_cast<uint8_t>(rng() % 0x7F);  // 0x00..0x7E, 0x7F is NaN
    if (rng() % 2 != 0) c |= 0x80;
  }
  for (auto& s : a.scales)
    s = static_cast<uint8_t>(110 + rng() % 15);
  a.val.resize(a.codes.size());
  for (size_t i = 0; i < a.codes.size(); ++i) {
    const int s = a.scales[i / 32];
    a.val[i] = e4m3_to_float(a.codes[i]) * std::ldexp(1.0f, s - 127);
  }
  a.d_codes = upload(interleaved(a.codes), st, "act codes");
  a.d_scales = upload(a.scales, st, "act scales");
  return a;
}

// Experts [0, experts) of `mats` matrices; expert e of matrix m uses pool[m][e % pool size].
struct ExpertSet {
  int32_t experts = 0;
  int mats = 1;
  std::vector<std::vector<Fp4Matrix>> pool;
  DeviceBuffer table;

  const Fp4Matrix& matrix(int m, int e) const {
    const auto& p = pool[static_cast<size_t>(m)];
    return p[static_cast<size_t>(e) % p.size()];
  }
};

ExpertSet make_experts(int32_t experts, int mats, int64_t n, int64_t k, int pool, uint64_t seed,
                       cudaStream_t st) {
  ExpertSet s;
  s.experts = experts;
  s.mats = mats;
  s.pool.resize(static_cast<size_t>(mats));
  for (int m = 0; m < mats; ++m)
    for (int i = 0; i < pool; ++i)
      s.pool[static_cast<size_t>(m)].push_back(random_fp4(n, k, seed + 100 * m + i, st));
  std::vector<Fp4ExpertMatrix> table(static_cast<size_t>(mats * experts));
  for (int m = 0; m < mats; ++m)
    for (int e = 0; e < experts; ++e)
      table[static_cast<size_t>(m * experts + e)] = {s.matrix(m, e).d_codes.as<uint8_t>(),
                                                     s.matrix(m, e).d_scales.as<uint8_t>()};
  s.table = upload(table, st, "expert table");
  return s;
}

// moe_permute + moe_expert_tiles for ids [rows, topk].
int32_t expert_of_pair(const Routing& r, int64_t p) {
  const auto it = std::upper_bound(r.off.begin(), r.off.end(), static_cast<int32_t>(p));
  return static_cast<int32_t>(it - r.off.begin()) - 1;
}

// `before` (optional) runs right before the launch: it may enqueue the launch the GEMM follows
// and edit the parameters.
std::vector<float> run_gemm(const Routing& r, const Act& a, bool gather, const ExpertSet& w,
                            int64_t n, ActPrecision prec, cudaStream_t st,
                            const std::function<void(MoeExpertGemmParams&)>& before = nullptr) {
  const auto cols = static_cast<size_t>(w.mats * n);
  const bool bf16 = prec == ActPrecision::kBF16;
  DeviceBuffer out = bf16 ? poisoned<uint16_t>(static_cast<size_t>(r.pairs) * cols, st)
                          : poisoned<float>(static_cast<size_t>(r.pairs) * cols, st);
  MoeExpertGemmParams p;
  p.xq = a.d_codes.as<uint8_t>();
  p.xq_scale = a.d_scales.as<uint8_t>();
  p.pair_index = gather ? r.d_idx.as<int32_t>() : nullptr;
  p.topk = r.topk;
  p.tiles = r.d_tiles.as<MoeExpertTile>();
  p.tile_count = r.tile_count;
  p.tile_tokens = r.tile_tokens;
  p.weights = w.table.as<Fp4ExpertMatrix>();
  p.experts = w.experts;
  p.mats = w.mats;
  p.pairs = r.pairs;
  p.n = n;
  p.k = a.k;
  p.out = out.data();
  p.precision = prec;
  if (before) before(p);
  moe_expert_gemm(p, st);
  if (bf16) return from_bf16(download<uint16_t>(out, static_cast<size_t>(r.pairs) * cols, st));
  return download<float>(out, static_cast<size_t>(r.pairs) * cols, st);
}

// Every element written; checked ones within 2^-9 * sum |x * w| (the fp8 tensor-core partial
// keeps ~13+ bits of its 32 exact products; promotion adds kb fp32 roundings) plus half a bf16
// ulp of |ref| for bf16 output. Columns: all, or every `col_step`-th (plus the last).
void check_gemm(const std::vector<float>& got, const Routing& r, const Act& a, bool gather,
                const ExpertSet& w, int64_t n, bool bf16, int64_t col_step, const char* what) {
  const int64_t cols = w.mats * n;
  double worst = 0.0, err2 = 0.0, ref2 = 0.0;
  for (int64_t p = 0; p < r.pairs; ++p) {
    const int32_t e = expert_of_pair(r, p);
    ASSERT_GE(e, 0) << what;
    const int64_t arow = gather ? r.idx[static_cast<size_t>(p)] / r.topk : p;
    const float* x = a.val.data() + arow * a.k;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = got[static_cast<size_t>(p * cols + c)];
      ASSERT_FALSE(std::isnan(v)) << what << " pair " << p << " col " << c << " not written";
      if (c % col_step != 0 && c != cols - 1) continue;
      const Fp4Matrix& m = w.matrix(static_cast<int>(c / n), e);
      const float* wr = m.dec.data() + (c % n) * a.k;
      double ref = 0.0, abs_sum = 0.0;
      for (int64_t kk = 0; kk < a.k; ++kk) {
        const double t = static_cast<double>(x[kk]) * wr[kk];
        ref += t;
        abs_sum += std::fabs(t);
      }
      const double err = std::fabs(v - ref);
      const double allowed =
          std::ldexp(abs_sum, -9) + (bf16 ? std::ldexp(std::fabs(ref), -8) : 0.0) + 1e-30;
      worst = std::max(worst, err / allowed);
      err2 += err * err;
      ref2 += ref * ref;
    }
  }
  std::printf("%-44s max err/allowed %.3f  rel_l2 %.3e\n", what, worst,
              std::sqrt(err2 / std::max(ref2, 1e-300)));
  EXPECT_LE(worst, 1.0) << what;
}

TEST(MoeExpertGpu, TileListCoversEveryPairInExpertOrder) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  for (const int64_t rows : {1, 16, 40, 300}) {
    const int32_t tok = rows >= 40 ? kMoeTileTokensPrefill : kMoeTileTokens;
    const Routing r =
        route(random_ids(rows, kE, kTopk, 11 + rows, rows / 2), rows, kE, kTopk, st, tok);
    const auto tiles = download<MoeExpertTile>(r.d_tiles, static_cast<size_t>(r.tile_count), st);
    std::vector<MoeExpertTile> want;
    for (int32_t e = 0; e < kE; ++e) {
      for (int32_t f = r.off[static_cast<size_t>(e)]; f < r.off[static_cast<size_t>(e) + 1];
           f += tok) {
        want.push_back({e, f, std::min(tok, r.off[static_cast<size_t>(e) + 1] - f), 0});
      }
    }
    ASSERT_LE(static_cast<int64_t>(want.size()), r.tile_count);
    for (size_t i = 0; i < tiles.size(); ++i) {
      const MoeExpertTile w = i < want.size() ? want[i] : MoeExpertTile{};
      EXPECT_EQ(tiles[i].expert, w.expert) << "rows " << rows << " tile " << i;
      if (w.expert < 0) continue;
      EXPECT_EQ(tiles[i].first_pair, w.first_pair) << "rows " << rows << " tile " << i;
      EXPECT_EQ(tiles[i].count, w.count) << "rows " << rows << " tile " << i;
    }
  }
}

// w1 and w3 in one launch over gathered token rows, at decode batch sizes; rows 0..hot-1 all
// route to expert 7, so that expert gets 3 tiles of <= 8 pairs at 20 rows.
TEST(MoeExpertGpu, GateUpGatherMatchesCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const ExpertSet w = make_experts(kE, 2, kInter, kDim, 3, 500, st);
  uint64_t seed = 900;
  for (const int64_t rows : {1, 5, 16, 20}) {
    for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
      const Act x = random_act(rows, kDim, ++seed, st);
      const Routing r =
          route(random_ids(rows, kE, kTopk, ++seed, rows == 20 ? 20 : 0), rows, kE, kTopk, st);
      const auto got = run_gemm(r, x, true, w, kInter, prec, st);
      const bool bf16 = prec == ActPrecision::kBF16;
      char what[96];
      std::snprintf(what, sizeof(what), "w1|w3 rows=%ld %s", static_cast<long>(rows),
                    bf16 ? "bf16" : "fp32");
      check_gemm(got, r, x, true, w, kInter, bf16, r.pairs > 30 ? 5 : 1, what);
    }
  }
}

TEST(MoeExpertGpu, DownProjectionOverPairsMatchesCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const ExpertSet w = make_experts(kE, 1, kDim, kInter, 3, 700, st);
  uint64_t seed = 1900;
  for (const int64_t rows : {1, 9}) {
    for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
      const Routing r = route(random_ids(rows, kE, kTopk, ++seed, rows), rows, kE, kTopk, st);
      const Act h = random_act(r.pairs, kInter, ++seed, st);
      const auto got = run_gemm(r, h, false, w, kDim, prec, st);
      const bool bf16 = prec == ActPrecision::kBF16;
      char what[96];
      std::snprintf(what, sizeof(what), "w2 rows=%ld %s", static_cast<long>(rows),
                    bf16 ? "bf16" : "fp32");
      check_gemm(got, r, h, false, w, kDim, bf16, r.pairs > 30 ? 3 : 1, what);
    }
  }
}

// The fixtures' tiny shapes: k = 192 (a partial last stage of 2 blocks) and k = 64, n = 64.
TEST(MoeExpertGpu, TinyShapesMatchCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const struct {
    int64_t n, k;
    int mats;
  } shapes[] = {{64, 192, 2}, {192, 64, 1}, {128, 256, 2}};
  uint64_t seed = 3000;
  for (const auto& s : shapes) {
    const ExpertSet w = make_experts(8, s.mats, s.n, s.k, 8, ++seed, st);
    const int64_t rows = 13;
    const Routing r = route(random_ids(rows, 8, 2, ++seed), rows, 8, 2, st);
    const bool gather = s.mats == 2;
    const Act x = random_act(gather ? rows : r.pairs, s.k, ++seed, st);
    const auto got = run_gemm(r, x, gather, w, s.n, ActPrecision::kF32, st);
    char what[96];
    std::snprintf(what, sizeof(what), "tiny n=%ld k=%ld mats=%d", static_cast<long>(s.n),
                  static_cast<long>(s.k), s.mats);
    check_gemm(got, r, x, gather, w, s.n, false, 1, what);
  }
}

// A token's expert outputs are bitwise the same whether it is decoded alone or in a batch of 16
// whose other tokens share its experts (different tiles, different positions in them).
TEST(MoeExpertGpu, PairRowsAreBatchInvariant) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const ExpertSet w = make_experts(kE, 2, kInter, kDim, 2, 4000, st);
  const int64_t rows = 16;
  std::vector<int32_t> ids = random_ids(rows, kE, kTopk, 4100);
  for (int64_t r = 1; r < rows; ++r)  // every row shares token 0's first two experts
    for (int j = 0; j < 2; ++j)
      ids[static_cast<size_t>(r * kTopk + j)] = ids[static_cast<size_t>(j)];
  for (int64_t r = 1; r < rows; ++r) {  // keep the rows' experts distinct
    std::vector<int32_t> row(ids.begin() + r * kTopk, ids.begin() + (r + 1) * kTopk);
    std::sort(row.begin(), row.end());
    ASSERT_EQ(std::adjacent_find(row.begin(), row.end()), row.end()) << "row " << r;
  }
  const Act x = random_act(rows, kDim, 4200, st);
  const Routing big = route(ids, rows, kE, kTopk, st);
  const auto got_big = run_gemm(big, x, true, w, kInter, ActPrecision::kF32, st);
  const std::vector<int32_t> ids0(ids.begin(), ids.begin() + kTopk);
  const Routing one = route(ids0, 1, kE, kTopk, st);
  const auto got_one = run_gemm(one, x, true, w, kInter, ActPrecision::kF32, st);
  const int64_t cols = 2 * kInter;
  for (int j = 0; j < kTopk; ++j) {
    const int64_t pb = big.pos[static_cast<size_t>(j)], po = one.pos[static_cast<size_t>(j)];
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(dense_test::float_bits(got_big[static_cast<size_t>(pb * cols + c)]),
                dense_test::float_bits(got_one[static_cast<size_t>(po * cols + c)]))
          << "slot " << j << " col " << c;
    }
  }
}

// Rows `rows` of `a`, in that order, as an activation set of their own.
Act select_rows(const Act& a, const std::vector<int64_t>& rows, cudaStream_t st) {
  Act s;
  s.rows = static_cast<int64_t>(rows.size());
  s.k = a.k;
  const auto k = static_cast<size_t>(a.k);
  for (const int64_t r : rows) {
    const auto r0 = static_cast<size_t>(r);
    s.codes.insert(s.codes.end(), a.codes.begin() + r0 * k, a.codes.begin() + (r0 + 1) * k);
    s.scales.insert(s.scales.end(), a.scales.begin() + r0 * k / 32,
                    a.scales.begin() + (r0 + 1) * k / 32);
    s.val.insert(s.val.end(), a.val.begin() + r0 * k, a.val.begin() + (r0 + 1) * k);
  }
  s.d_codes = upload(interleaved(s.codes), st, "act codes");
  s.d_scales = upload(s.scales, st, "act scales");
  return s;
}

// w2 (k = 2304, no K split): a token's outputs are bitwise the same decoded alone (6 tiles: one
// m64 tile of weight rows per CTA) as in a batch of 24 (enough tiles for two per CTA).
TEST(MoeExpertGpu, DownRowsAreBatchInvariantAcrossCtaShapes) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const ExpertSet w = make_experts(kE, 1, kDim, kInter, 2, 6000, st);
  const int64_t rows = 24;
  const std::vector<int32_t> ids = random_ids(rows, kE, kTopk, 6100);
  const Routing big = route(ids, rows, kE, kTopk, st);
  const Act h = random_act(big.pairs, kInter, 6200, st);
  const std::vector<int32_t> ids0(ids.begin(), ids.begin() + kTopk);
  const Routing one = route(ids0, 1, kE, kTopk, st);
  // The alone token's pair j sits at one.pos[j]: the activations of big.pos[j].
  std::vector<int64_t> src(kTopk);
  for (int j = 0; j < kTopk; ++j)
    src[static_cast<size_t>(one.pos[static_cast<size_t>(j)])] = big.pos[static_cast<size_t>(j)];
  const Act h1 = select_rows(h, src, st);
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  std::vector<int> shapes;
  const auto got_big =
      run_gemm(big, h, false, w, kDim, ActPrecision::kF32, st,
               [&](MoeExpertGemmParams& p) { shapes.push_back(moe_expert_cta_mtiles(p, sms)); });
  const auto got_one =
      run_gemm(one, h1, false, w, kDim, ActPrecision::kF32, st,
               [&](MoeExpertGemmParams& p) { shapes.push_back(moe_expert_cta_mtiles(p, sms)); });
  ASSERT_EQ(shapes, (std::vector<int>{2, 1})) << "the two launches must use both CTA shapes";
  for (int j = 0; j < kTopk; ++j) {
    const int64_t pb = big.pos[static_cast<size_t>(j)], po = one.pos[static_cast<size_t>(j)];
    for (int64_t c = 0; c < kDim; ++c) {
      ASSERT_EQ(dense_test::float_bits(got_big[static_cast<size_t>(pb * kDim + c)]),
                dense_test::float_bits(got_one[static_cast<size_t>(po * kDim + c)]))
          << "slot " << j << " col " << c;
    }
  }
  check_gemm(got_one, one, h1, false, w, kDim, false, 1, "w2 alone");
}

// tiles_early (w2 after moe_swiglu_quant): the tile and the first stages' weights are read
// before the kernel waits for the launch it follows, the activations after. Here that launch is
// moe_interleave_act writing the activations into a poisoned buffer: the outputs are bitwise
// those of the plain launch on ready activations, for decode and prefill tiles.
TEST(MoeExpertGpu, EarlyWeightsWaitForTheLaunchBefore) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const ExpertSet w = make_experts(kE, 1, kDim, kInter, 2, 5000, st);
  uint64_t seed = 5100;
  for (const int64_t rows : {1, 9, 40}) {
    const int32_t tok = rows >= 40 ? kMoeTileTokensPrefill : kMoeTileTokens;
    const Routing r =
        route(random_ids(rows, kE, kTopk, ++seed, rows / 2), rows, kE, kTopk, st, tok);
    const Act h = random_act(r.pairs, kInter, ++seed, st);
    const auto want = run_gemm(r, h, false, w, kDim, ActPrecision::kF32, st);
    const DeviceBuffer natural = upload(h.codes, st, "natural act codes");
    for (int rep = 0; rep < 3; ++rep) {
      DeviceBuffer dst = poisoned<uint8_t>(h.codes.size(), st);
      const auto got =
          run_gemm(r, h, false, w, kDim, ActPrecision::kF32, st, [&](MoeExpertGemmParams& p) {
            MoeInterleaveParams ip;
            ip.src = natural.as<uint8_t>();
            ip.dst = dst.as<uint8_t>();
            ip.rows = r.pairs;
            ip.k = kInter;
            moe_interleave_act(ip, st);
            p.xq = dst.as<uint8_t>();
            p.tiles_early = true;
          });
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(dense_test::float_bits(got[i]), dense_test::float_bits(want[i]))
            << "rows " << rows << " rep " << rep << " element " << i;
      }
    }
  }
}

// Prefill tiles (64 pairs: 8 groups sharing each converted weight fragment, one m64n64k32
// wgmma for all of them) give bitwise the decode tiles' outputs (m64n8k32 per group), and match
// the CPU: 40 tokens all routed to expert 7 (a full tile of 64
// would need more; 40 pairs = one partial prefill tile vs 5 decode tiles) plus spread experts;
// w2 over 600 pairs with one expert taking 100 (a full and a partial prefill tile).
TEST(MoeExpertGpu, PrefillTilesAreBitwiseTheDecodeTiles) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  struct Case {
    int mats;
    int64_t n, k, rows;
  };
  uint64_t seed = 5000;
  for (const Case c : {Case{2, kInter, kDim, 40}, Case{1, kDim, kInter, 100}}) {
    const ExpertSet w = make_experts(kE, c.mats, c.n, c.k, 2, ++seed, st);
    const std::vector<int32_t> ids = random_ids(c.rows, kE, kTopk, ++seed, c.rows);
    const Routing dec = route(ids, c.rows, kE, kTopk, st, kMoeTileTokens);
    const Routing pre = route(ids, c.rows, kE, kTopk, st, kMoeTileTokensPrefill);
    const bool gather = c.mats == 2;
    const Act x = random_act(gather ? c.rows : dec.pairs, c.k, ++seed, st);
    for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
      const auto got_dec = run_gemm(dec, x, gather, w, c.n, prec, st);
      const auto got_pre = run_gemm(pre, x, gather, w, c.n, prec, st);
      ASSERT_EQ(got_dec.size(), got_pre.size());
      int64_t differ = 0;
      for (size_t i = 0; i < got_dec.size(); ++i)
        differ += dense_test::float_bits(got_dec[i]) != dense_test::float_bits(got_pre[i]);
      EXPECT_EQ(differ, 0) << "mats " << c.mats << " rows " << c.rows;
      if (prec == ActPrecision::kF32) {
        char what[96];
        std::snprintf(what, sizeof(what), "prefill tiles mats=%d rows=%ld", c.mats,
                      static_cast<long>(c.rows));
        check_gemm(got_pre, pre, x, gather, w, c.n, false, 7, what);
      }
    }
  }
  EXPECT_EQ(moe_expert_tile_tokens(kE, 6), kMoeTileTokens);
  EXPECT_EQ(moe_expert_tile_tokens(kE, int64_t{8192} * kTopk), kMoeTileTokensPrefill);
  EXPECT_THROW(moe_expert_tile_bound(kE, 6, 16), Error);
}

// CPU: Model::expert's element arithmetic in fp32 (bf16 storage: inputs and h rounded to bf16),
// then cpu::act_quant_e4m3<float> per 32; the GPU's codes and scales decode to the same values.
TEST(MoeExpertGpu, SwigluQuantMatchesCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const int64_t rows = 9, pairs = rows * kTopk;
  std::vector<int32_t> idx(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p)
    idx[static_cast<size_t>(p)] = static_cast<int32_t>((p * 7) % pairs);  // a permutation
  const auto route_w = random_normal(static_cast<size_t>(pairs), 51, 0.5f);
  const DeviceBuffer d_idx = upload(idx, st), d_w = upload(route_w, st);
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    for (const float limit : {10.0f, 0.0f}) {
      for (const bool weighted : {true, false}) {
        const bool interleave = weighted;  // both orders, each with and without weights
        const bool bf16 = prec == ActPrecision::kBF16;
        auto gu = random_normal(static_cast<size_t>(pairs * 2 * kInter), 60 + bf16, 6.0f);
        if (bf16) gu = from_bf16(to_bf16(gu));
        const DeviceBuffer d_gu = bf16 ? upload(to_bf16(gu), st) : upload(gu, st);
        DeviceBuffer codes = poisoned<uint8_t>(static_cast<size_t>(pairs * kInter), st);
        DeviceBuffer scales = poisoned<uint8_t>(static_cast<size_t>(pairs * kInter / 32), st);
        MoeSwigluQuantParams p;
        p.gu = d_gu.data();
        p.weights = weighted ? d_w.as<float>() : nullptr;
        p.pair_index = d_idx.as<int32_t>();
        p.pairs = pairs;
        p.inter = kInter;
        p.limit = limit;
        p.precision = prec;
        p.codes = codes.as<uint8_t>();
        p.scales = scales.as<uint8_t>();
        p.interleave = interleave;
        moe_swiglu_quant(p, st);
        auto c = download<uint8_t>(codes, static_cast<size_t>(pairs * kInter), st);
        if (interleave) {  // back to the natural order
          const std::vector<uint8_t> il = c;
          for (size_t b = 0; b < c.size(); b += 32)
            for (size_t i = 0; i < 16; ++i) {
              c[b + 2 * i] = il[b + i];
              c[b + 2 * i + 1] = il[b + 16 + i];
            }
        }
        const auto s = download<uint8_t>(scales, static_cast<size_t>(pairs * kInter / 32), st);
        int64_t mismatches = 0;
        for (int64_t q = 0; q < pairs; ++q) {
          std::vector<float> h(static_cast<size_t>(kInter));
          for (int64_t j = 0; j < kInter; ++j) {
            float g = gu[static_cast<size_t>(q * 2 * kInter + j)];
            float u = gu[static_cast<size_t>(q * 2 * kInter + kInter + j)];
            if (limit > 0) {
              u = std::clamp(u, -limit, limit);
              g = std::min(g, limit);
            }
            float v = g / (1.0f + std::exp(-g)) * u;
            if (weighted) v = route_w[static_cast<size_t>(idx[static_cast<size_t>(q)])] * v;
            if (bf16) v = bf16_to_float(bf16_from_float(v));
            h[static_cast<size_t>(j)] = v;
          }
          cpu::act_quant_e4m3(std::span<float>(h), 32);
          for (int64_t j = 0; j < kInter; ++j) {
            const size_t i = static_cast<size_t>(q * kInter + j);
            const float got = e4m3_to_float(c[i]) * std::ldexp(1.0f, s[i / 32] - 127);
            if (dense_test::float_bits(got) != dense_test::float_bits(h[static_cast<size_t>(j)]))
              ++mismatches;
          }
        }
        EXPECT_EQ(mismatches, 0) << (bf16 ? "bf16" : "fp32") << " limit " << limit
                                 << (weighted ? " weighted, interleaved" : "");
      }
    }
  }
}

TEST(MoeExpertGpu, InterleaveIsTheBlockPermutation) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const int64_t rows = 7, k = kDim;
  std::mt19937_64 rng(77);
  std::vector<uint8_t> src(static_cast<size_t>(rows * k));
  for (auto& b : src)
    b = static_cast<uint8_t>(rng());
  const DeviceBuffer d_src = upload(src, st);
  DeviceBuffer d_dst = poisoned<uint8_t>(src.size(), st);
  MoeInterleaveParams p;
  p.src = d_src.as<uint8_t>();
  p.dst = d_dst.as<uint8_t>();
  p.rows = rows;
  p.k = k;
  moe_interleave_act(p, st);
  EXPECT_EQ(download<uint8_t>(d_dst, src.size(), st), interleaved(src));
  p.k = 48;
  EXPECT_THROW(moe_interleave_act(p, st), Error);
  p.k = k;
  p.dst = const_cast<uint8_t*>(p.src);  // in place is not allowed
  EXPECT_THROW(moe_interleave_act(p, st), Error);
}

// A step with no tokens: the permutation writes all-zero offsets, the tile list is empty and the
// GEMM launches nothing (its output stays poisoned).
TEST(MoeExpertGpu, EmptyStepIsANoOp) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const Routing r = route({}, 0, kE, kTopk, st);
  EXPECT_EQ(r.off, std::vector<int32_t>(kE + 1, 0));
  EXPECT_EQ(r.tile_count, 0);
  const ExpertSet w = make_experts(kE, 1, 64, 64, 1, 6000, st);
  const Act x = random_act(1, 64, 6001, st);
  DeviceBuffer out = poisoned<float>(16, st);
  MoeExpertGemmParams p;
  p.xq = x.d_codes.as<uint8_t>();
  p.xq_scale = x.d_scales.as<uint8_t>();
  p.tiles = r.d_tiles.as<MoeExpertTile>();
  p.weights = w.table.as<Fp4ExpertMatrix>();
  p.experts = kE;
  p.n = 64;
  p.k = 64;
  p.out = out.data();
  moe_expert_gemm(p, st);
  for (const float v : download<float>(out, 16, st))
    EXPECT_TRUE(std::isnan(v));
}

// The launchers validate before touching the device, so this runs without a GPU (in CI): the
// pointers are host addresses that are never dereferenced.
TEST(MoeExpertLaunch, RejectsBadParamsBeforeAnyDeviceWork) {
  alignas(256) static std::byte fake[1024];
  const cudaStream_t st = nullptr;
  MoeExpertGemmParams ok;
  ok.xq = reinterpret_cast<const uint8_t*>(fake);
  ok.xq_scale = ok.xq;
  ok.tiles = reinterpret_cast<const MoeExpertTile*>(fake);
  ok.tile_count = moe_expert_tile_bound(kE, 6);
  ok.weights = reinterpret_cast<const Fp4ExpertMatrix*>(fake);
  ok.experts = kE;
  ok.mats = 2;
  ok.pairs = 6;
  ok.n = kInter;
  ok.k = kDim;
  ok.out = fake;
  auto bad = [&](auto edit) {
    MoeExpertGemmParams p = ok;
    edit(p);
    EXPECT_THROW(moe_expert_gemm(p, st), Error);
  };
  bad([](MoeExpertGemmParams& p) { p.k = 48; });
  bad([](MoeExpertGemmParams& p) { p.k = 1 << 20; });
  bad([](MoeExpertGemmParams& p) { p.n = 40; });
  bad([](MoeExpertGemmParams& p) { p.mats = 3; });
  bad([](MoeExpertGemmParams& p) { p.tile_count = 1; });
  bad([](MoeExpertGemmParams& p) { p.tile_tokens = 16; });
  bad([](MoeExpertGemmParams& p) {  // a prefill list is shorter than a decode one: too short
    p.tile_tokens = kMoeTileTokens;
    p.pairs = 600;
    p.tile_count = moe_expert_tile_bound(kE, 600, kMoeTileTokensPrefill);
  });
  bad([](MoeExpertGemmParams& p) { p.weights = nullptr; });
  bad([](MoeExpertGemmParams& p) { p.xq += 4; });
  bad([](MoeExpertGemmParams& p) {
    p.pair_index = reinterpret_cast<const int32_t*>(p.out);
    p.topk = 0;
  });
  MoeSwigluQuantParams sq;
  sq.gu = fake;
  sq.codes = reinterpret_cast<uint8_t*>(fake);
  sq.scales = sq.codes;
  sq.pairs = 4;
  sq.inter = 48;
  EXPECT_THROW(moe_swiglu_quant(sq, st), Error);
  sq.inter = 64;
  sq.gu = nullptr;
  EXPECT_THROW(moe_swiglu_quant(sq, st), Error);
  MoeExpertTilesParams tp;
  tp.offsets = reinterpret_cast<const int32_t*>(fake);
  tp.tiles = reinterpret_cast<MoeExpertTile*>(fake);
  tp.experts = 2000;
  tp.pairs = 6;
  EXPECT_THROW(moe_expert_tiles(tp, st), Error);
  tp.experts = kE;
  tp.tile_tokens = 7;
  EXPECT_THROW(moe_expert_tiles(tp, st), Error);
  MoeInterleaveParams ip;
  ip.src = reinterpret_cast<const uint8_t*>(fake);
  ip.dst = reinterpret_cast<uint8_t*>(fake) + 512;
  ip.rows = 1;
  ip.k = 40;
  EXPECT_THROW(moe_interleave_act(ip, st), Error);
  ip.k = 64;
  ip.dst += 8;
  EXPECT_THROW(moe_interleave_act(ip, st), Error);
}

// Tile-list sizes: the bound covers the worst routing (every active expert with a partial tile),
// and the regime choice follows the average pairs per expert.
TEST(MoeExpertLaunch, TileBoundsAndRegime) {
  EXPECT_EQ(moe_expert_tile_bound(kE, 0), 0);
  EXPECT_EQ(moe_expert_tile_bound(kE, 6), 6);                     // 6 experts, 1 pair each
  EXPECT_EQ(moe_expert_tile_bound(kE, 96), 96);                   // up to 96 experts
  EXPECT_EQ(moe_expert_tile_bound(8, 26), (26 + 7 * 8 + 7) / 8);  // 8 experts, 26 pairs
  EXPECT_EQ(moe_expert_tile_bound(kE, 24576, kMoeTileTokensPrefill), (24576 + 63 * 384 + 63) / 64);
  // Exhaustive on a small case: every split of 20 pairs over 3 experts fits the bound.
  for (int a = 0; a <= 20; ++a)
    for (int b = 0; a + b <= 20; ++b) {
      const int c = 20 - a - b;
      for (const int t : {kMoeTileTokens, kMoeTileTokensPrefill}) {
        const int64_t need = (a + t - 1) / t + (b + t - 1) / t + (c + t - 1) / t;
        EXPECT_LE(need, moe_expert_tile_bound(3, 20, t)) << a << " " << b << " " << t;
      }
    }
  EXPECT_EQ(moe_expert_tile_tokens(kE, 6 * 64), kMoeTileTokens);
  EXPECT_EQ(moe_expert_tile_tokens(kE, 32 * kE), kMoeTileTokensPrefill);
  EXPECT_THROW(moe_expert_tile_bound(0, 6), Error);
  EXPECT_THROW(moe_expert_tile_bound(kE, 6, 16), Error);
}

// The upload's byte encoding (run in CI): a bijection, and the GEMM's mask-and-shift conversion of
// an encoded byte gives e4m3 bytes worth exactly 2^-6 times its checkpoint nibbles' e2m1 values,
// in every byte lane of the 32-bit word.
TEST(MoeExpertLaunch, EncodedCodesConvertToTheE2m1Values) {
  std::vector<int> seen(256, 0);
  for (int c = 0; c < 256; ++c) {
    const auto byte = static_cast<uint8_t>(c);
    const uint8_t enc = fp4_expert_encode_byte(byte);
    ++seen[enc];
    ASSERT_EQ(fp4_expert_decode_byte(enc), byte) << c;
    for (int lane = 0; lane < 4; ++lane) {
      // The other lanes all ones: nothing may leak across byte lanes.
      const uint32_t word = (static_cast<uint32_t>(enc) << (8 * lane)) | ~(0xFFu << (8 * lane));
      const auto even = static_cast<uint8_t>(fp4_expert_even_e4m3(word) >> (8 * lane));
      const auto odd = static_cast<uint8_t>(fp4_expert_odd_e4m3(word) >> (8 * lane));
      EXPECT_EQ(e4m3_to_float(even) * 64.0f, e2m1_to_float(static_cast<uint8_t>(c & 0xF)))
          << "byte " << c << " lane " << lane;
      EXPECT_EQ(e4m3_to_float(odd) * 64.0f, e2m1_to_float(static_cast<uint8_t>(c >> 4)))
          << "byte " << c << " lane " << lane;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 256);
}

// The tiled FP4 codes (host packing, run in CI): every checkpoint byte lands exactly once, a K
// tile of a 64-row block is 4 KiB of consecutive memory whose 64-byte lines are its rows in order
// (what the GEMM's cp.async addressing assumes), and the padding of partial tiles is zero.
TEST(MoeExpertLaunch, TiledCodesHoldEveryByteOnceInKTiles) {
  const struct {
    int64_t n, k;
  } shapes[] = {{128, 5120}, {64, 192}, {192, 64}, {96, 96}, {2304, 512}};
  std::mt19937_64 rng(77);
  for (const auto& s : shapes) {
    const int64_t row_bytes = s.k / 2, tiles = (s.k + 127) / 128, blocks = (s.n + 63) / 64;
    std::vector<uint8_t> src(static_cast<size_t>(s.n * row_bytes));
    for (auto& b : src)
      b = static_cast<uint8_t>(rng() | 1);  // never 0: a zero in the output is padding
    const std::vector<uint8_t> out = tiled_codes(src, s.n, s.k);
    ASSERT_EQ(static_cast<int64_t>(out.size()), blocks * tiles * 4096) << s.n << "x" << s.k;
    std::vector<int> hits(out.size(), 0);
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t b = 0; b < row_bytes; ++b) {
        const int64_t o = fp4_expert_code_offset(r, b, s.k);
        ASSERT_TRUE(o >= 0 && o < static_cast<int64_t>(out.size()));
        ++hits[static_cast<size_t>(o)];
        // Tile (r / 64, b / 64) starts at 4 KiB * (r / 64 * tiles + b / 64); row r % 64 is its
        // line r % 64.
        const int64_t tile_base = ((r / 64) * tiles + b / 64) * 4096;
        ASSERT_EQ(o, tile_base + (r % 64) * 64 + b % 64);
        ASSERT_EQ(fp4_expert_decode_byte(out[static_cast<size_t>(o)]),
                  src[static_cast<size_t>(r * row_bytes + b)]);
      }
    int64_t padding = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_LE(hits[i], 1);
      if (hits[i] == 0) {
        ASSERT_EQ(out[i], 0) << "padding byte " << i;
        ++padding;
      }
    }
    EXPECT_EQ(padding, static_cast<int64_t>(out.size()) - s.n * row_bytes);
  }
  std::vector<uint8_t> bad(64 * 24), dst(fp4_expert_codes_bytes(64, 48));
  EXPECT_THROW(pack_fp4_expert_codes(bad.data(), 64, 48, dst.data()), Error);  // k % 32 != 0
}

}  // namespace
}  // namespace di::moe_expert_test
