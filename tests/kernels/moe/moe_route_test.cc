// MoE routing on the GPU against the CPU reference at V4.1 sizes (384 experts, top-6, dim 5120):
// the router (cpu::route_token<float>, planted exact ties, image-span rows with bias_vl), the
// expert-contiguous permutation (offsets, stable pair order, inverse), and the combine (ascending
// expert id, then the shared expert; bitwise in fp32 and bf16 storage). Poisoned outputs.

#include "kernels/cuda/moe/moe_route.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/error.h"
#include "kernels/cpu/moe_gate.h"
#include "kernels/cuda/moe/moe_expert.cuh"

namespace di {
namespace {

using dense_test::download;
using dense_test::poisoned;
using dense_test::random_normal;
using dense_test::upload;

constexpr int kE = 384;
constexpr int kK = 6;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// The V4.1 router's params (top-6 of 384, normalised, route scale 1.5) over device buffers.
MoeRouteParams route_params(const DeviceBuffer& logits, const DeviceBuffer& bias,
                            const DeviceBuffer& bias_vl, const DeviceBuffer& mask,
                            DeviceBuffer& ids, DeviceBuffer& weights, int64_t rows, float temp) {
  MoeRouteParams p;
  p.logits = logits.as<float>();
  p.bias = bias.as<float>();
  p.bias_vl = bias_vl.as<float>();
  p.image_mask = mask.as<uint8_t>();
  p.ids = ids.as<int32_t>();
  p.weights = weights.as<float>();
  p.rows = rows;
  p.experts = kE;
  p.topk = kK;
  p.gate_temp = temp;
  p.norm_topk_prob = true;
  p.route_scale = 1.5f;
  return p;
}

// The permutation of `rows` rows of top-kK `ids` over kE experts: its params over poisoned
// offsets / pair index / inverse and a tile list filled with 0xFF bytes, which the struct owns.
struct PermuteRun {
  DeviceBuffer off, idx, pos, tiles;
  MoePermuteParams p;
};
PermuteRun permute_run(const int32_t* ids, int64_t rows, cudaStream_t st) {
  const int64_t n = rows * kK;
  const int32_t tile_tokens = moe_expert_tile_tokens(kE, n);
  const int64_t tile_bound = moe_expert_tile_bound(kE, n, tile_tokens);
  PermuteRun run{poisoned<int32_t>(kE + 1, st), poisoned<int32_t>(static_cast<size_t>(n), st),
                 poisoned<int32_t>(static_cast<size_t>(n), st),
                 DeviceBuffer(static_cast<size_t>(tile_bound) * sizeof(MoeExpertTile), "tiles"),
                 MoePermuteParams{}};
  run.tiles.fill_async(0xFF, st);
  MoePermuteParams& p = run.p;
  p.ids = ids;
  p.rows = rows;
  p.topk = kK;
  p.experts = kE;
  p.offsets = run.off.as<int32_t>();
  p.pair_index = run.idx.as<int32_t>();
  p.pair_pos = run.pos.as<int32_t>();
  p.tile_tokens = tile_tokens;
  p.tile_bound = tile_bound;
  p.tiles = run.tiles.as<MoeExpertTile>();
  return run;
}

Routed gpu_route(const std::vector<float>& logits, const std::vector<float>& bias,
                 const std::vector<float>& bias_vl, const std::vector<uint8_t>& mask, int64_t rows,
                 float temp, cudaStream_t st) {
  DeviceBuffer d_l = upload(logits, st), d_b = upload(bias, st), d_bv = upload(bias_vl, st);
  DeviceBuffer d_m = upload(mask, st);
  DeviceBuffer d_ids = poisoned<int32_t>(static_cast<size_t>(rows * kK), st);
  DeviceBuffer d_w = poisoned<float>(static_cast<size_t>(rows * kK), st);
  moe_route(route_params(d_l, d_b, d_bv, d_m, d_ids, d_w, rows, temp), st);
  return {download<int32_t>(d_ids, static_cast<size_t>(rows * kK), st),
          download<float>(d_w, static_cast<size_t>(rows * kK), st)};
}

TEST(MoeRouteGpu, MatchesCpuRouter) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  for (const float temp : {1.0f, 0.7f}) {
    const int64_t rows = 1000;
    auto logits = random_normal(static_cast<size_t>(rows * kE), 5, 3.0f);
    const auto bias = random_normal(kE, 6, 0.2f);
    const auto bias_vl = random_normal(kE, 7, 0.2f);
    std::vector<uint8_t> mask(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      mask[static_cast<size_t>(r)] = (r % 7 == 3) ? 1 : 0;
    // Planted exact ties: in every 5th row experts 10 and 200 get a logit far above the row's
    // others (and the same bias), so they take slots 0 and 1, the lower id first; logits above
    // 20 exercise the softplus threshold.
    std::vector<float> bias_t = bias, bias_vl_t = bias_vl;
    bias_t[200] = bias_t[10];
    bias_vl_t[200] = bias_vl_t[10];
    for (int64_t r = 0; r < rows; r += 5) {
      float* l = logits.data() + r * kE;
      const float mx = *std::max_element(l, l + kE) + 10.0f;  // far above the rest: slots 0, 1
      l[10] = mx;
      l[200] = mx;
      if (r + 1 < rows) l[kE + 300] = 25.0f;  // the next row: above the softplus threshold
    }
    const Routed g = gpu_route(logits, bias_t, bias_vl_t, mask, rows, temp, st);
    int exact = 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t ids[kK];
      float w[kK];
      const float* b = mask[static_cast<size_t>(r)] ? bias_vl_t.data() : bias_t.data();
      cpu::route_token<float>(logits.data() + r * kE, kE, b, kK, temp, true, 1.5, ids, w);
      for (int j = 0; j < kK; ++j) {
        ASSERT_EQ(g.ids[static_cast<size_t>(r * kK + j)], ids[j]) << "row " << r << " slot " << j;
        const float gw = g.weights[static_cast<size_t>(r * kK + j)];
        // exp and log1p are rounded once each on both sides, but glibc's float versions and
        // the rounded double ones differ in the last bit for a few arguments: a few ulps.
        EXPECT_NEAR(gw, w[j], 1e-6f * std::fabs(w[j])) << "row " << r << " slot " << j;
        exact += gw == w[j] ? 1 : 0;
      }
      if (r % 5 == 0) {
        EXPECT_EQ(g.ids[static_cast<size_t>(r * kK)], 10) << "tie, row " << r;
        EXPECT_EQ(g.ids[static_cast<size_t>(r * kK + 1)], 200) << "tie, row " << r;
      }
    }
    std::printf("router (gate_temp %.1f): %d / %lld weights bitwise equal\n", temp, exact,
                static_cast<long long>(rows * kK));
  }
}

// Both algorithms (radix sort; the one-CTA counting sort of decode steps) at sizes on both sides
// of the automatic choice.
TEST(MoeRouteGpu, PermutationIsStableAndInverse) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  std::mt19937_64 rng(11);
  for (const MoePermuteAlgo algo :
       {MoePermuteAlgo::kAuto, MoePermuteAlgo::kRadixSort, MoePermuteAlgo::kCount}) {
    for (const int64_t rows : {int64_t{1}, int64_t{7}, int64_t{300}, int64_t{341}, int64_t{8192}}) {
      SCOPED_TRACE(::testing::Message() << "algo " << static_cast<int>(algo));
      // Distinct experts per row (as the router gives), skewed towards a few hot experts.
      std::vector<int32_t> ids(static_cast<size_t>(rows * kK));
      std::uniform_int_distribution<int> hot(0, 9), any(0, kE - 1);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int32_t> row;
        while (row.size() < static_cast<size_t>(kK)) {
          const int32_t e = (rng() % 2) ? hot(rng) : any(rng);
          if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
        }
        std::copy(row.begin(), row.end(), ids.begin() + r * kK);
      }
      const int64_t n = rows * kK;
      DeviceBuffer d_ids = upload(ids, st);
      PermuteRun run = permute_run(d_ids.as<int32_t>(), rows, st);
      DeviceBuffer &d_off = run.off, &d_idx = run.idx, &d_pos = run.pos, &d_tiles = run.tiles;
      MoePermuteParams& p = run.p;
      const size_t ws = moe_permute_workspace_bytes(rows, kK, kE);
      DeviceBuffer d_ws(ws, "permute workspace");
      p.workspace = d_ws.data();
      p.workspace_bytes = ws;
      const bool tiles_written = moe_permute(p, st, algo);
      EXPECT_EQ(tiles_written, algo == MoePermuteAlgo::kCount || (algo == MoePermuteAlgo::kAuto &&
                                                                  n <= kMoePermuteCountMaxPairs));
      if (!tiles_written) {
        MoeExpertTilesParams tp;
        tp.offsets = p.offsets;
        tp.experts = kE;
        tp.pairs = n;
        tp.tile_tokens = p.tile_tokens;
        tp.tiles = p.tiles;
        moe_expert_tiles(tp, st);
      }
      const auto off = download<int32_t>(d_off, kE + 1, st);
      const auto idx = download<int32_t>(d_idx, static_cast<size_t>(n), st);
      const auto pos = download<int32_t>(d_pos, static_cast<size_t>(n), st);
      // Reference: pairs grouped by expert, in pair-index order inside each expert.
      std::vector<int32_t> want;
      std::vector<int32_t> want_off(kE + 1, 0);
      for (int32_t e = 0; e < kE; ++e) {
        want_off[static_cast<size_t>(e)] = static_cast<int32_t>(want.size());
        for (int64_t i = 0; i < n; ++i)
          if (ids[static_cast<size_t>(i)] == e) want.push_back(static_cast<int32_t>(i));
      }
      want_off[kE] = static_cast<int32_t>(n);
      EXPECT_EQ(off, want_off) << "rows " << rows;
      EXPECT_EQ(idx, want) << "rows " << rows;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(pos[static_cast<size_t>(idx[static_cast<size_t>(i)])], i) << "rows " << rows;
      // Tiles (from the permutation itself or from moe_expert_tiles): ceil(count / t) per expert in
      // expert order, then unused entries.
      std::vector<MoeExpertTile> want_tiles;
      const int32_t t = p.tile_tokens;
      for (int32_t e = 0; e < kE; ++e) {
        const int32_t first = want_off[static_cast<size_t>(e)];
        const int32_t count = want_off[static_cast<size_t>(e) + 1] - first;
        for (int32_t j = 0; j * t < count; ++j)
          want_tiles.push_back({e, first + j * t, std::min(t, count - j * t), 0});
      }
      want_tiles.resize(static_cast<size_t>(p.tile_bound));
      std::vector<MoeExpertTile> got_tiles(want_tiles.size());
      d_tiles.copy_to_host_async(got_tiles.data(), got_tiles.size() * sizeof(MoeExpertTile), st);
      stream.synchronize();
      for (size_t k = 0; k < want_tiles.size(); ++k) {
        ASSERT_EQ(got_tiles[k].expert, want_tiles[k].expert) << "rows " << rows << " tile " << k;
        if (want_tiles[k].expert < 0) continue;
        ASSERT_EQ(got_tiles[k].first_pair, want_tiles[k].first_pair) << "tile " << k;
        ASSERT_EQ(got_tiles[k].count, want_tiles[k].count) << "tile " << k;
      }
    }
  }
}

TEST(MoeRouteGpu, CombineIsBitwiseTheCpuOrder) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const int64_t rows = 37, dim = 5120, n = rows * kK;
  std::mt19937_64 rng(3);
  std::vector<int32_t> ids(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> row;
    while (row.size() < static_cast<size_t>(kK)) {
      const auto e = static_cast<int32_t>(rng() % kE);
      if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
    }
    std::copy(row.begin(), row.end(), ids.begin() + r * kK);
  }
  // Any permutation works for the combine: a shuffled one.
  for (int64_t i = 0; i < n; ++i)
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(pos.begin(), pos.end(), rng);
  for (const bool bf16 : {false, true}) {
    auto out = random_normal(static_cast<size_t>(n * dim), 21, 1.0f);
    auto shared = random_normal(static_cast<size_t>(rows * dim), 22, 1.0f);
    if (bf16) {
      out = dense_test::from_bf16(dense_test::to_bf16(out));
      shared = dense_test::from_bf16(dense_test::to_bf16(shared));
    }
    DeviceBuffer d_out = bf16 ? upload(dense_test::to_bf16(out), st) : upload(out, st);
    DeviceBuffer d_sh = bf16 ? upload(dense_test::to_bf16(shared), st) : upload(shared, st);
    DeviceBuffer d_ids = upload(ids, st), d_pos = upload(pos, st);
    DeviceBuffer d_y = poisoned<float>(static_cast<size_t>(rows * dim), st);
    MoeCombineParams p;
    p.expert_out = d_out.data();
    p.shared = d_sh.data();
    p.ids = d_ids.as<int32_t>();
    p.pair_pos = d_pos.as<int32_t>();
    p.y = d_y.data();
    p.rows = rows;
    p.topk = kK;
    p.dim = dim;
    p.precision = bf16 ? ActPrecision::kBF16 : ActPrecision::kF32;
    moe_combine(p, st);
    std::vector<float> got;
    if (bf16) {
      got = dense_test::from_bf16(download<uint16_t>(d_y, static_cast<size_t>(rows * dim), st));
    } else {
      got = download<float>(d_y, static_cast<size_t>(rows * dim), st);
    }
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<std::pair<int32_t, int32_t>> order;
      for (int j = 0; j < kK; ++j)
        order.emplace_back(ids[static_cast<size_t>(r * kK + j)],
                           pos[static_cast<size_t>(r * kK + j)]);
      std::sort(order.begin(), order.end());
      for (int64_t d = 0; d < dim; ++d) {
        float acc = 0.0f;
        for (const auto& [e, q] : order)
          acc += out[static_cast<size_t>(q * dim + d)];
        acc += shared[static_cast<size_t>(r * dim + d)];
        if (bf16) acc = bf16_to_float(bf16_from_float(acc));
        const float g = got[static_cast<size_t>(r * dim + d)];
        ASSERT_EQ(std::memcmp(&g, &acc, 4), 0) << (bf16 ? "bf16" : "fp32") << " row " << r
                                               << " dim " << d << ": " << g << " vs " << acc;
      }
    }
  }
}

// moe_route_permute (one launch for decode steps): every array bitwise the two launches' (ids,
// weights, offsets, pair order, inverse, tiles), at 1, 5, 8 and 32 rows (image rows included);
// 33 rows launch nothing and return false.
TEST(MoeRouteGpu, RoutePermuteIsRouteThenPermute) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const auto bias = random_normal(kE, 16, 0.2f);
  const auto bias_vl = random_normal(kE, 17, 0.2f);
  for (const int64_t rows : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{32}, int64_t{33}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows);
    const auto logits = random_normal(static_cast<size_t>(rows * kE), 18 + rows, 3.0f);
    std::vector<uint8_t> mask(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      mask[static_cast<size_t>(r)] = r % 3 == 1 ? 1 : 0;
    const int64_t n = rows * kK;
    DeviceBuffer d_l = upload(logits, st), d_b = upload(bias, st), d_bv = upload(bias_vl, st),
                 d_m = upload(mask, st);
    struct Out {
      std::vector<int32_t> ids, off, idx, pos;
      std::vector<float> w;
      std::vector<uint8_t> tiles;
    };
    auto run = [&](bool fused) {
      DeviceBuffer d_ids = poisoned<int32_t>(static_cast<size_t>(n), st),
                   d_w = poisoned<float>(static_cast<size_t>(n), st);
      const MoeRouteParams r = route_params(d_l, d_b, d_bv, d_m, d_ids, d_w, rows, 1.0f);
      PermuteRun pr = permute_run(r.ids, rows, st);
      DeviceBuffer &d_off = pr.off, &d_idx = pr.idx, &d_pos = pr.pos, &d_tiles = pr.tiles;
      const MoePermuteParams& p = pr.p;
      const size_t tile_bytes = static_cast<size_t>(p.tile_bound) * sizeof(MoeExpertTile);
      if (fused) {
        const bool launched = moe_route_permute(r, p, st);
        EXPECT_EQ(launched, rows <= kMoeRoutePermuteMaxRows);
        if (!launched) return std::optional<Out>();
      } else {
        moe_route(r, st);
        EXPECT_TRUE(moe_permute(p, st, MoePermuteAlgo::kCount));
      }
      Out o;
      o.ids = download<int32_t>(d_ids, static_cast<size_t>(n), st);
      o.w = download<float>(d_w, static_cast<size_t>(n), st);
      o.off = download<int32_t>(d_off, kE + 1, st);
      o.idx = download<int32_t>(d_idx, static_cast<size_t>(n), st);
      o.pos = download<int32_t>(d_pos, static_cast<size_t>(n), st);
      o.tiles.resize(tile_bytes);
      d_tiles.copy_to_host_async(o.tiles.data(), tile_bytes, st);
      stream.synchronize();
      return std::optional<Out>(std::move(o));
    };
    const std::optional<Out> two = run(false), one = run(true);
    ASSERT_TRUE(two.has_value());
    if (rows > kMoeRoutePermuteMaxRows) {
      EXPECT_FALSE(one.has_value());
      continue;
    }
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(one->ids, two->ids);
    EXPECT_EQ(std::memcmp(one->w.data(), two->w.data(), one->w.size() * 4), 0);
    EXPECT_EQ(one->off, two->off);
    EXPECT_EQ(one->idx, two->idx);
    EXPECT_EQ(one->pos, two->pos);
    EXPECT_EQ(one->tiles, two->tiles);
  }
}

TEST(MoeRouteGpu, BadParamsAreRejected) {
  MoeRouteParams r;
  r.rows = 1;
  r.experts = 2000;  // more than the kernel holds
  r.topk = 6;
  EXPECT_THROW(moe_route(r, nullptr), Error);
  r.experts = 384;
  r.topk = 0;
  EXPECT_THROW(moe_route(r, nullptr), Error);
  MoeCombineParams c;
  c.rows = 1;
  c.topk = 6;
  c.dim = 5122;  // not a multiple of 4
  EXPECT_THROW(moe_combine(c, nullptr), Error);
  // The fused route + permutation: the permutation must read the route's ids.
  // (Host pointers: the launcher throws before any device work.)
  int32_t ids[6] = {};
  float f[6] = {};
  r.topk = 6;
  r.gate_temp = 1.0f;
  r.logits = r.bias = r.weights = f;
  r.ids = ids;
  MoePermuteParams p;
  p.rows = 1;
  p.topk = 6;
  p.experts = 384;
  p.offsets = ids;
  p.ids = ids + 1;
  try {
    moe_route_permute(r, p, nullptr);
    ADD_FAILURE() << "expected di::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must read the route's ids"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace di
