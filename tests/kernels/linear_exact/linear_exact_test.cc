// The exact-order linear layers of the fp32 forward (kernels/cuda/linear_exact) against the CPU
// reference cpu::linear<float>: BITWISE equal outputs, at V4.1 sizes (wq_a 1280 x 5120 FP8,
// router gate 384 x 5120 bf16, experts 2304 x 5120 FP4) and the fixtures' tiny ones (k = 64,
// 192), for fp32 rows and for act_quant codes + scales, strided rows (the grouped wo_a slices),
// and the grouped routed-expert form over a real routing. Poisoned outputs. Launcher errors run
// without a GPU.

#include "kernels/cuda/linear_exact/linear_exact.cuh"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "../moe/moe_test_routing.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/error.h"
#include "common/fp8.h"
#include "core/tensor_view.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/moe/moe_expert.cuh"
#include "kernels/cuda/ops/act_quant.cuh"

namespace di::linear_exact_test {
namespace {

using dense_test::download;
using dense_test::float_bits;
using dense_test::poisoned;
using dense_test::random_normal;
using dense_test::upload;

// A weight in a checkpoint format with its bytes (the WeightRef views point into them).
struct HostWeight {
  ExactWeightFormat format;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> w, s;
  std::vector<uint16_t> w16;
  cpu::WeightRef ref() const {
    switch (format) {
      case ExactWeightFormat::kFp8Block:
      case ExactWeightFormat::kFp8WoATiled:  // host copies are the checkpoint's row order
        return cpu::fp8_block_weight(
            ConstTensorView{reinterpret_cast<const std::byte*>(w.data()), DType::kF8E4M3, {n, k}},
            ConstTensorView{reinterpret_cast<const std::byte*>(s.data()),
                            DType::kF8E8M0,
                            {(n + 31) / 32, (k + 31) / 32}},
            32, 32, "w");
      case ExactWeightFormat::kFp4Row:
      case ExactWeightFormat::kFp4ExpertTiled:  // host copies are the checkpoint's row order
        return cpu::fp4_row_weight(
            ConstTensorView{reinterpret_cast<const std::byte*>(w.data()), DType::kI8, {n, k / 2}},
            ConstTensorView{
                reinterpret_cast<const std::byte*>(s.data()), DType::kF8E8M0, {n, k / 32}},
            "w");
      case ExactWeightFormat::kBf16:
        break;
    }
    return cpu::dense_weight(
        ConstTensorView{reinterpret_cast<const std::byte*>(w16.data()), DType::kBF16, {n, k}}, "w");
  }
};

HostWeight random_weight(ExactWeightFormat f, int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostWeight h{f, n, k, {}, {}, {}};
  if (f == ExactWeightFormat::kBf16) {
    h.w16 = dense_test::to_bf16(random_normal(static_cast<size_t>(n * k), seed, 0.05f));
    return h;
  }
  const bool fp4 = f == ExactWeightFormat::kFp4Row;
  h.w.resize(static_cast<size_t>(fp4 ? n * k / 2 : n * k));
  for (auto& b : h.w) {
    auto c = static_cast<uint8_t>(rng());
    if (!fp4 && e4m3_is_nan(c)) c = static_cast<uint8_t>(c - 1);
    b = c;
  }
  h.s.resize(static_cast<size_t>(fp4 ? n * (k / 32) : ((n + 31) / 32) * ((k + 31) / 32)));
  for (auto& b : h.s)
    b = static_cast<uint8_t>(120 + rng() % 8);  // 2^-7 .. 2^0
  return h;
}

bool have_gpu() {
  return cuda_device_count() > 0;
}

// GPU: y = x . W^T (fp32 rows, or codes from the GPU act_quant of the same rows).
std::vector<float> run(const HostWeight& hw, const std::vector<float>& x, int64_t m, bool quantised,
                       cudaStream_t st) {
  DeviceBuffer dx = upload(x, st);
  DeviceBuffer dw = hw.format == ExactWeightFormat::kBf16 ? upload(hw.w16, st) : upload(hw.w, st);
  DeviceBuffer ds = upload(hw.s, st);
  DeviceBuffer dy = poisoned<float>(static_cast<size_t>(m * hw.n), st);
  DeviceBuffer xq(std::max<size_t>(static_cast<size_t>(m * hw.k), 16), "xq");
  DeviceBuffer xs(std::max<size_t>(static_cast<size_t>(m * hw.k / 32), 16), "xs");
  LinearExactParams p;
  if (quantised) {
    ActQuantParams q;
    q.x = dx.data();
    q.codes = xq.as<uint8_t>();
    q.scales = xs.as<uint8_t>();
    q.rows = m;
    q.dim = hw.k;
    q.block = 32;
    act_quant(q, st);
    p.xq = xq.as<uint8_t>();
    p.xs = xs.as<uint8_t>();
  } else {
    p.x = dx.as<float>();
  }
  p.format = hw.format;
  p.weight = dw.as<uint8_t>();
  p.weight_scale = hw.format == ExactWeightFormat::kBf16 ? nullptr : ds.as<uint8_t>();
  p.m = m;
  p.n = hw.n;
  p.k = hw.k;
  p.y = dy.as<float>();
  linear_exact(p, st);
  return download<float>(dy, static_cast<size_t>(m * hw.n), st);
}

// CPU: the reference's rows (act_quant's fake quantisation when quantised) through cpu::linear.
std::vector<float> reference(const HostWeight& hw, std::vector<float> x, int64_t m,
                             bool quantised) {
  if (quantised) {
    for (int64_t r = 0; r < m; ++r)
      cpu::act_quant_e4m3(std::span<float>(x.data() + r * hw.k, static_cast<size_t>(hw.k)), 32);
  }
  std::vector<float> y(static_cast<size_t>(m * hw.n));
  cpu::linear(x.data(), m, hw.ref(), y.data());
  return y;
}

int64_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    bad += float_bits(a[i]) != float_bits(b[i]);
  return bad;
}

struct Case {
  const char* name;
  ExactWeightFormat format;
  int64_t n, k;
};

TEST(LinearExactGpu, BitwiseEqualToCpuLinear) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Stream stream;
  const Case cases[] = {
      {"v41_wq_a_fp8", ExactWeightFormat::kFp8Block, 1280, 5120},
      {"v41_gate_bf16", ExactWeightFormat::kBf16, 384, 5120},
      {"v41_expert_w1_fp4", ExactWeightFormat::kFp4Row, 2304, 5120},
      {"tiny_wq_b_fp8", ExactWeightFormat::kFp8Block, 512, 64},
      {"tiny_wq_a_fp8", ExactWeightFormat::kFp8Block, 64, 192},
      {"tiny_head_bf16", ExactWeightFormat::kBf16, 1280, 192},
      {"odd_n_fp8", ExactWeightFormat::kFp8Block, 77, 96},
  };
  uint64_t seed = 7;
  for (const Case& c : cases) {
    const HostWeight w = random_weight(c.format, c.n, c.k, ++seed);
    for (const int64_t m : {int64_t{1}, int64_t{13}}) {
      const std::vector<float> x = random_normal(static_cast<size_t>(m * c.k), ++seed, 1.5f);
      for (const bool quantised : {false, true}) {
        if (quantised && c.k % 32 != 0) continue;
        const auto got = run(w, x, m, quantised, stream.get());
        const auto want = reference(w, x, m, quantised);
        EXPECT_EQ(mismatches(got, want), 0)
            << c.name << " m=" << m << (quantised ? " (act_quant codes)" : " (fp32 rows)");
      }
    }
  }
}

// The grouped wo_a form: strided activation columns and strided output columns.
TEST(LinearExactGpu, StridedRowsAndOutputs) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Stream stream;
  cudaStream_t st = stream.get();
  const int64_t m = 9, groups = 2, gw = 256, rank = 64;
  const HostWeight w = random_weight(ExactWeightFormat::kFp8Block, groups * rank, gw, 99);
  const std::vector<float> o = random_normal(static_cast<size_t>(m * groups * gw), 98);
  DeviceBuffer d_o = upload(o, st), d_w = upload(w.w, st), d_s = upload(w.s, st);
  DeviceBuffer d_z = poisoned<float>(static_cast<size_t>(m * groups * rank), st);
  for (int64_t g = 0; g < groups; ++g) {
    LinearExactParams p;
    p.x = d_o.as<float>() + g * gw;
    p.x_stride = groups * gw;
    p.weight = d_w.as<uint8_t>() + g * rank * gw;
    p.weight_scale = d_s.as<uint8_t>() + (g * rank / 32) * (gw / 32);
    p.m = m;
    p.n = rank;
    p.k = gw;
    p.y = d_z.as<float>() + g * rank;
    p.y_stride = groups * rank;
    linear_exact(p, st);
  }
  const auto z = download<float>(d_z, static_cast<size_t>(m * groups * rank), st);
  const cpu::WeightRef ref = w.ref();
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<float> og(static_cast<size_t>(m * gw)), zg(static_cast<size_t>(m * rank));
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(o.begin() + (r * groups + g) * gw, gw, og.begin() + r * gw);
    cpu::linear(og.data(), m, ref.slice_rows(g * rank, (g + 1) * rank), zg.data());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < rank; ++c) {
        ASSERT_EQ(float_bits(z[static_cast<size_t>((r * groups + g) * rank + c)]),
                  float_bits(zg[static_cast<size_t>(r * rank + c)]))
            << "group " << g << " row " << r << " col " << c;
      }
    }
  }
}

// Routed experts: w1 | w3 with the token gather and w2 over the pairs, each pair's outputs
// bitwise equal to cpu::linear of its expert on its (fake-quantised) row.
TEST(LinearExactGpu, GroupedExpertsBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Stream stream;
  cudaStream_t st = stream.get();
  const int32_t experts = 12, topk = 4;
  const int64_t rows = 19, k = 192, n = 64;
  const moe_test::Routing r =
      moe_test::route(moe_test::random_ids(rows, experts, topk, 5), rows, experts, topk, st);
  std::vector<HostWeight> w1, w3;
  std::vector<DeviceBuffer> keep;
  std::vector<Fp4ExpertMatrix> mats(2 * experts);
  for (int32_t e = 0; e < experts; ++e) {
    w1.push_back(random_weight(ExactWeightFormat::kFp4Row, n, k, 200 + e));
    w3.push_back(random_weight(ExactWeightFormat::kFp4Row, n, k, 300 + e));
    for (int m = 0; m < 2; ++m) {
      const HostWeight& hw = m == 0 ? w1.back() : w3.back();
      std::vector<uint8_t> tiled(static_cast<size_t>(fp4_expert_codes_bytes(n, k)));
      pack_fp4_expert_codes(hw.w.data(), n, k, tiled.data());
      keep.push_back(upload(tiled, st));
      keep.push_back(upload(hw.s, st));
      mats[static_cast<size_t>(m * experts + e)] =
          Fp4ExpertMatrix{keep[keep.size() - 2].as<uint8_t>(), keep.back().as<uint8_t>()};
    }
  }
  DeviceBuffer d_mats = upload(mats, st);
  std::vector<float> x = random_normal(static_cast<size_t>(rows * k), 6, 1.5f);
  DeviceBuffer d_x = upload(x, st);
  DeviceBuffer xq(static_cast<size_t>(rows * k), "xq"),
      xs(static_cast<size_t>(rows * k / 32), "xs");
  ActQuantParams q;
  q.x = d_x.data();
  q.codes = xq.as<uint8_t>();
  q.scales = xs.as<uint8_t>();
  q.rows = rows;
  q.dim = k;
  act_quant(q, st);
  DeviceBuffer out = poisoned<float>(static_cast<size_t>(r.pairs * 2 * n), st);
  GroupedLinearExactParams g;
  g.xq = xq.as<uint8_t>();
  g.xs = xs.as<uint8_t>();
  g.pair_index = r.d_idx.as<int32_t>();
  g.topk = topk;
  g.tiles = r.d_tiles.as<MoeExpertTile>();
  g.tile_count = r.tile_count;
  g.weights = d_mats.as<Fp4ExpertMatrix>();
  g.experts = experts;
  g.mats = 2;
  g.n = n;
  g.k = k;
  g.out = out.as<float>();
  grouped_linear_exact(g, st);
  const auto got = download<float>(out, static_cast<size_t>(r.pairs * 2 * n), st);
  for (int64_t row = 0; row < rows; ++row)
    cpu::act_quant_e4m3(std::span<float>(x.data() + row * k, static_cast<size_t>(k)), 32);
  int64_t bad = 0;
  for (int64_t p = 0; p < r.pairs; ++p) {
    const int64_t tok = r.idx[static_cast<size_t>(p)] / topk;
    const auto e = static_cast<size_t>(
        std::upper_bound(r.off.begin(), r.off.end(), static_cast<int32_t>(p)) - r.off.begin() - 1);
    std::vector<float> y1(static_cast<size_t>(n)), y3(static_cast<size_t>(n));
    cpu::linear(x.data() + tok * k, 1, w1[e].ref(), y1.data());
    cpu::linear(x.data() + tok * k, 1, w3[e].ref(), y3.data());
    for (int64_t c = 0; c < n; ++c) {
      bad += float_bits(got[static_cast<size_t>(p * 2 * n + c)]) !=
             float_bits(y1[static_cast<size_t>(c)]);
      bad += float_bits(got[static_cast<size_t>(p * 2 * n + n + c)]) !=
             float_bits(y3[static_cast<size_t>(c)]);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(LinearExactErrors, BadParamsAreRejectedBeforeAnyLaunch) {
  LinearExactParams p;
  p.m = 1;
  p.n = 8;
  p.k = 64;
  EXPECT_THROW(linear_exact(p, nullptr), Error);  // neither x nor codes
  float dummy = 0;
  uint8_t byte = 0;
  p.x = &dummy;
  p.xq = &byte;
  p.xs = &byte;
  EXPECT_THROW(linear_exact(p, nullptr), Error);  // both
  GroupedLinearExactParams g;
  g.n = 48;  // not a multiple of 32
  g.k = 64;
  g.experts = 1;
  EXPECT_THROW(grouped_linear_exact(g, nullptr), Error);
  g.n = 64;
  g.mats = 3;
  EXPECT_THROW(grouped_linear_exact(g, nullptr), Error);
}

}  // namespace
}  // namespace di::linear_exact_test
