// RMSNorm, RMSNorm + act_quant and act_quant on the GPU against the CPU references
// (cpu::rms_norm<float>, cpu::act_quant_e4m3<float>) at V4.1 dimensions, with poisoned outputs,
// and the row batch invariance of all three (M in {1, 7, 64, 1000}).
//
// Tolerances: rms_norm fp32 3e-6 * max(1, sqrt(dim / 5120)) relative per element (the GPU sums
// squares in a tree, the CPU sequentially); bf16 storage within one bf16 ulp of the rounded CPU
// value. act_quant codes and scales bitwise: against the reference applied to the same input (for
// the fused op, to the normed row the GPU produced, which is itself checked bitwise against
// rms_norm).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "common/fp8.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/ops/act_quant.cuh"
#include "kernels/cuda/ops/rmsnorm.cuh"
#include "kernels/dense_ops/dense_ops_test_util.h"

namespace di {
namespace {

using namespace dense_test;  // NOLINT

constexpr float kEps = 1e-6f;

// act_quant of one row on the host with the reference's formulas: codes, scale bytes, and the
// quantised values, which must equal cpu::act_quant_e4m3 on the same row.
void host_act_quant(const float* x, int64_t dim, int block, uint8_t* codes, uint8_t* scales) {
  for (int64_t b = 0; b < dim; b += block) {
    float amax = 0;
    for (int i = 0; i < block; ++i)
      amax = std::max(amax, std::fabs(x[b + i]));
    const float a = std::max(amax, 1e-4f);
    const uint8_t byte = e8m0_pow2ceil(a * (1.0f / 448.0f));
    const float s = e8m0_to_float(byte);
    scales[b / block] = byte;
    for (int i = 0; i < block; ++i)
      codes[b + i] = e4m3_from_float(std::clamp(x[b + i] / s, -448.0f, 448.0f));
  }
}

// Checks codes/scales of `rows` rows of x against the reference, bitwise.
void expect_quant_matches(const std::vector<float>& x, int64_t rows, int64_t dim, int block,
                          const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales) {
  std::vector<uint8_t> rc(static_cast<size_t>(dim));
  std::vector<uint8_t> rs(static_cast<size_t>(dim / block));
  int64_t bad_codes = 0;
  int64_t bad_scales = 0;
  int64_t bad_values = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    host_act_quant(xr, dim, block, rc.data(), rs.data());
    std::vector<float> sim(xr, xr + dim);
    cpu::act_quant_e4m3<float>(std::span<float>(sim), block);
    for (int64_t i = 0; i < dim; ++i) {
      bad_codes += codes[static_cast<size_t>(r * dim + i)] != rc[static_cast<size_t>(i)];
      const float q = e4m3_to_float(rc[static_cast<size_t>(i)]) *
                      e8m0_to_float(rs[static_cast<size_t>(i / block)]);
      bad_values += float_bits(q) != float_bits(sim[static_cast<size_t>(i)]);
    }
    for (int64_t b = 0; b < dim / block; ++b)
      bad_scales +=
          scales[static_cast<size_t>(r * (dim / block) + b)] != rs[static_cast<size_t>(b)];
  }
  EXPECT_EQ(bad_codes, 0) << "e4m3 codes differing from the reference";
  EXPECT_EQ(bad_scales, 0) << "ue8m0 scale bytes differing from the reference";
  EXPECT_EQ(bad_values, 0) << "host reference disagrees with cpu::act_quant_e4m3";
}

// Rows with per-block magnitudes spread over 2^-30 .. 2^30, some zero blocks, and exact ties of
// e4m3 rounding, so every scale path and the subnormal codes are exercised.
std::vector<float> quant_input(int64_t rows, int64_t dim, uint64_t seed) {
  std::vector<float> x = random_normal(static_cast<size_t>(rows * dim), seed);
  std::mt19937_64 rng(seed + 7);
  for (size_t b = 0; b < x.size(); b += 32) {
    const int e = static_cast<int>(rng() % 61) - 30;
    const int kind = static_cast<int>(rng() % 16);
    for (size_t i = b; i < b + 32 && i < x.size(); ++i) {
      if (kind == 0) x[i] = 0.0f;
      if (kind == 1) x[i] = std::ldexp(std::round(x[i] * 64.0f) / 64.0f, e);  // exact ties
      if (kind > 1) x[i] = std::ldexp(x[i], e);
    }
  }
  return x;
}

struct NormCase {
  int64_t dim;
  int block;
};

class NormQuantTest : public ::testing::TestWithParam<NormCase> {
 protected:
  void SetUp() override { DI_REQUIRE_GPU(); }
};

TEST_P(NormQuantTest, RmsNormFp32MatchesCpu) {
  const auto [dim, block] = GetParam();
  const int64_t rows = 67;
  Stream stream;
  auto x = random_normal(static_cast<size_t>(rows * dim), 11 + dim, 2.5f);
  const auto w = random_normal(static_cast<size_t>(dim), 12 + dim, 0.3f);
  const DeviceBuffer xd = upload(x, stream.get());
  const DeviceBuffer wd = upload(w, stream.get());
  DeviceBuffer yd = poisoned<float>(static_cast<size_t>(rows * dim), stream.get());
  RmsNormParams p;
  p.x = xd.data();
  p.weight = wd.as<float>();
  p.y = yd.data();
  p.rows = rows;
  p.dim = dim;
  p.eps = kEps;
  rms_norm(p, stream.get());
  const auto y = download<float>(yd, x.size(), stream.get());
  cpu::rms_norm<float>(x.data(), rows, dim, w.data(), kEps);
  double max_rel = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_FALSE(std::isnan(y[i])) << "unwritten output at " << i;
    max_rel = std::max(max_rel, std::fabs(static_cast<double>(y[i]) - x[i]) /
                                    std::max(std::fabs(static_cast<double>(x[i])), 1e-30));
  }
  // The CPU's sequential fp32 sum of squares drifts ~sqrt(dim) ulps; the GPU's tree sum less.
  EXPECT_LE(max_rel, 3e-6 * std::max(1.0, std::sqrt(static_cast<double>(dim) / 5120.0)));
  RecordProperty("max_rel_err", std::to_string(max_rel));
}

TEST_P(NormQuantTest, RmsNormBf16WithinOneUlp) {
  const auto [dim, block] = GetParam();
  const int64_t rows = 33;
  Stream stream;
  const auto xb = to_bf16(random_normal(static_cast<size_t>(rows * dim), 21 + dim, 3.0f));
  const auto w = from_bf16(to_bf16(random_normal(static_cast<size_t>(dim), 22 + dim, 0.3f)));
  const DeviceBuffer xd = upload(xb, stream.get());
  const DeviceBuffer wd = upload(w, stream.get());
  DeviceBuffer yd = poisoned<uint16_t>(xb.size(), stream.get());
  RmsNormParams p;
  p.x = xd.data();
  p.weight = wd.as<float>();
  p.y = yd.data();
  p.rows = rows;
  p.dim = dim;
  p.eps = kEps;
  p.precision = ActPrecision::kBF16;
  rms_norm(p, stream.get());
  const auto y = download<uint16_t>(yd, xb.size(), stream.get());
  auto ref = from_bf16(xb);
  cpu::rms_norm<float>(ref.data(), rows, dim, w.data(), kEps);
  int64_t exact = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const uint16_t r = bf16_from_float(ref[i]);
    exact += y[i] == r;
    ASSERT_LE(std::abs(static_cast<int>(y[i]) - static_cast<int>(r)), 1)
        << "bf16 rms_norm differs by more than one ulp at " << i;
  }
  EXPECT_GE(static_cast<double>(exact) / static_cast<double>(y.size()), 0.99);
}

TEST_P(NormQuantTest, FusedNormQuantMatchesReference) {
  const auto [dim, block] = GetParam();
  const int64_t rows = 45;
  Stream stream;
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    SCOPED_TRACE(prec == ActPrecision::kF32 ? "fp32" : "bf16");
    const bool bf = prec == ActPrecision::kBF16;
    auto x = random_normal(static_cast<size_t>(rows * dim), 31 + dim, 4.0f);
    if (bf) x = from_bf16(to_bf16(x));
    const auto w = from_bf16(to_bf16(random_normal(static_cast<size_t>(dim), 32 + dim, 0.5f)));
    const DeviceBuffer xd = bf ? upload(to_bf16(x), stream.get()) : upload(x, stream.get());
    const DeviceBuffer wd = upload(w, stream.get());
    const size_t n = x.size();
    const size_t esize = bf ? 2 : 4;
    DeviceBuffer y_alone(n * esize, "y alone");
    DeviceBuffer y_fused(n * esize, "y fused");
    y_alone.fill_async(0xFF, stream.get());
    y_fused.fill_async(0xFF, stream.get());
    DeviceBuffer codes = poisoned<uint8_t>(n, stream.get());
    DeviceBuffer scales = poisoned<uint8_t>(n / static_cast<size_t>(block), stream.get());
    RmsNormParams np;
    np.x = xd.data();
    np.weight = wd.as<float>();
    np.y = y_alone.data();
    np.rows = rows;
    np.dim = dim;
    np.eps = kEps;
    np.precision = prec;
    rms_norm(np, stream.get());
    RmsNormQuantParams qp;
    qp.norm = np;
    qp.norm.y = y_fused.data();
    qp.codes = codes.as<uint8_t>();
    qp.scales = scales.as<uint8_t>();
    qp.block = block;
    // Block 32: also the interleaved copy (each 32-block's even columns, then its odd ones).
    DeviceBuffer inter = poisoned<uint8_t>(n, stream.get());
    if (block == 32) qp.codes_interleaved = inter.as<uint8_t>();
    rms_norm_act_quant(qp, stream.get());
    const auto a = download<uint8_t>(y_alone, n * esize, stream.get());
    const auto f = download<uint8_t>(y_fused, n * esize, stream.get());
    ASSERT_EQ(a, f) << "the fused kernel's normed row differs from rms_norm's";
    if (block == 32) {
      const auto plain = download<uint8_t>(codes, n, stream.get());
      const auto got = download<uint8_t>(inter, n, stream.get());
      for (size_t b = 0; b < n; b += 32) {
        for (size_t j = 0; j < 32; ++j) {
          ASSERT_EQ(got[b + (j % 2 == 0 ? j / 2 : 16 + j / 2)], plain[b + j])
              << "interleaved code of column " << b + j;
        }
      }
    }
    std::vector<float> y(n);
    for (size_t i = 0; i < n; ++i) {
      if (bf) {
        uint16_t b;
        std::memcpy(&b, a.data() + 2 * i, 2);
        y[i] = bf16_to_float(b);
      } else {
        std::memcpy(&y[i], a.data() + 4 * i, 4);
      }
    }
    expect_quant_matches(y, rows, dim, block, download<uint8_t>(codes, n, stream.get()),
                         download<uint8_t>(scales, n / static_cast<size_t>(block), stream.get()));

    // Against the full CPU path (norm then quant on the CPU's normed row): codes may differ only
    // where the ~1e-7 norm difference crosses an e4m3 rounding boundary.
    std::vector<float> ref = x;
    cpu::rms_norm<float>(ref.data(), rows, dim, w.data(), kEps);
    if (bf) ref = from_bf16(to_bf16(ref));
    std::vector<uint8_t> rc(n), rs(n / static_cast<size_t>(block));
    for (int64_t r = 0; r < rows; ++r) {
      host_act_quant(ref.data() + r * dim, dim, block, rc.data() + r * dim,
                     rs.data() + r * (dim / block));
    }
    const auto gc = download<uint8_t>(codes, n, stream.get());
    int64_t off_by_one = 0;
    for (size_t i = 0; i < n; ++i) {
      if (gc[i] == rc[i]) continue;
      ASSERT_EQ(std::abs(static_cast<int>(gc[i] & 0x7F) - static_cast<int>(rc[i] & 0x7F)), 1)
          << "code " << i << " differs by more than one e4m3 step from the CPU path";
      ++off_by_one;
    }
    EXPECT_LE(static_cast<double>(off_by_one) / static_cast<double>(n), 1e-3);
  }
}

TEST_P(NormQuantTest, ActQuantBitwise) {
  const auto [dim, block] = GetParam();
  const int64_t rows = 129;
  Stream stream;
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    SCOPED_TRACE(prec == ActPrecision::kF32 ? "fp32" : "bf16");
    const bool bf = prec == ActPrecision::kBF16;
    auto x = quant_input(rows, dim, 41 + dim + static_cast<uint64_t>(bf));
    if (bf) x = from_bf16(to_bf16(x));
    const DeviceBuffer xd = bf ? upload(to_bf16(x), stream.get()) : upload(x, stream.get());
    const size_t n = x.size();
    DeviceBuffer codes = poisoned<uint8_t>(n, stream.get());
    DeviceBuffer scales = poisoned<uint8_t>(n / static_cast<size_t>(block), stream.get());
    ActQuantParams p;
    p.x = xd.data();
    p.codes = codes.as<uint8_t>();
    p.scales = scales.as<uint8_t>();
    p.rows = rows;
    p.dim = dim;
    p.block = block;
    p.precision = prec;
    act_quant(p, stream.get());
    expect_quant_matches(x, rows, dim, block, download<uint8_t>(codes, n, stream.get()),
                         download<uint8_t>(scales, n / static_cast<size_t>(block), stream.get()));
  }
}

// Row r of a batch of M rows is bitwise the same for every M.
TEST_P(NormQuantTest, RowsAreBatchInvariant) {
  const auto [dim, block] = GetParam();
  const int64_t max_rows = 1000;
  Stream stream;
  const auto x = random_normal(static_cast<size_t>(max_rows * dim), 51 + dim, 2.0f);
  const auto w = random_normal(static_cast<size_t>(dim), 52 + dim, 0.4f);
  const DeviceBuffer xd = upload(x, stream.get());
  const DeviceBuffer wd = upload(w, stream.get());
  std::vector<float> y_ref;
  std::vector<uint8_t> c_ref, s_ref;
  for (const int64_t m : {int64_t{1000}, int64_t{64}, int64_t{7}, int64_t{1}}) {
    SCOPED_TRACE(testing::Message() << "M = " << m);
    const size_t n = static_cast<size_t>(m * dim);
    DeviceBuffer yd = poisoned<float>(n, stream.get());
    DeviceBuffer cd = poisoned<uint8_t>(n, stream.get());
    DeviceBuffer sd = poisoned<uint8_t>(n / static_cast<size_t>(block), stream.get());
    RmsNormQuantParams qp;
    qp.norm.x = xd.data();
    qp.norm.weight = wd.as<float>();
    qp.norm.y = yd.data();
    qp.norm.rows = m;
    qp.norm.dim = dim;
    qp.norm.eps = kEps;
    qp.codes = cd.as<uint8_t>();
    qp.scales = sd.as<uint8_t>();
    qp.block = block;
    rms_norm_act_quant(qp, stream.get());
    const auto y = download<float>(yd, n, stream.get());
    const auto c = download<uint8_t>(cd, n, stream.get());
    const auto s = download<uint8_t>(sd, n / static_cast<size_t>(block), stream.get());
    if (y_ref.empty()) {
      y_ref = y;
      c_ref = c;
      s_ref = s;
      continue;
    }
    EXPECT_EQ(std::memcmp(y.data(), y_ref.data(), n * 4), 0);
    EXPECT_TRUE(std::equal(c.begin(), c.end(), c_ref.begin()));
    EXPECT_TRUE(std::equal(s.begin(), s.end(), s_ref.begin()));
  }
}

INSTANTIATE_TEST_SUITE_P(V41Dims, NormQuantTest,
                         ::testing::Values(NormCase{5120, 32}, NormCase{1280, 32},
                                           NormCase{512, 32}, NormCase{5120, 128},
                                           NormCase{20480, 32}),
                         [](const auto& tp) {
                           return "dim" + std::to_string(tp.param.dim) + "_block" +
                                  std::to_string(tp.param.block);
                         });

TEST(DenseOpsErrors, BadSizesNameTheOp) {
  RmsNormParams p;
  p.rows = 4;
  p.dim = 5121;
  try {
    rms_norm(p, nullptr);
    FAIL() << "expected di::Error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("5121"), std::string::npos) << e.what();
  }
  ActQuantParams q;
  q.rows = 1;
  q.dim = 5120;
  q.block = 48;
  try {
    act_quant(q, nullptr);
    FAIL() << "expected di::Error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("act_quant"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace di
