// The element-wise helpers (kernels/cuda/ops/scale.cuh): the in-place fp32 scale against the
// CPU's `v = v * s`, and the fp32 <-> bf16 conversion against common/bf16.h: bitwise.

#include "kernels/cuda/ops/scale.cuh"

#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/device.h"
#include "common/bf16.h"
#include "common/error.h"
#include "dense_ops_test_util.h"

namespace di::scale_test {
namespace {

TEST(ScaleValuesGpu, BitwiseEqualToCpuProducts) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Stream stream;
  for (const int64_t n : {int64_t{1}, int64_t{32 * 7}, int64_t{100003}}) {
    const std::vector<float> x = dense_test::random_normal(static_cast<size_t>(n), 3 + n, 4.0f);
    const float s = 0.015625f * 0.70710677f;  // 128^-1/2 * 32^-1/2 as the indexer rounds it
    DeviceBuffer d = dense_test::upload(x, stream.get());
    ScaleParams p;
    p.x = d.as<float>();
    p.n = n;
    p.s = s;
    scale_values(p, stream.get());
    const auto got = dense_test::download<float>(d, static_cast<size_t>(n), stream.get());
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = x[static_cast<size_t>(i)] * s;
      bad += dense_test::float_bits(got[static_cast<size_t>(i)]) != dense_test::float_bits(want);
    }
    EXPECT_EQ(bad, 0) << "n=" << n;
  }
}

// round_bf16: bf16(bf16(x) * s) in fp32 storage, bitwise the five-launch sequence it replaces
// (narrow, widen, scale, narrow, widen) and the host formula.
TEST(ScaleValuesGpu, RoundedScaleEqualsTheSeparateConversions) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Stream stream;
  const int64_t n = 32 * 97;
  std::vector<float> x = dense_test::random_normal(static_cast<size_t>(n), 77, 6.0f);
  x[0] = 1.0f + 0x1p-8f;  // a rounding tie before the product
  const float s = 0.015625f * 0.70710677f;
  DeviceBuffer fused = dense_test::upload(x, stream.get());
  DeviceBuffer steps = dense_test::upload(x, stream.get());
  DeviceBuffer tmp(static_cast<size_t>(n) * 2, "bf16");
  ScaleParams p;
  p.x = fused.as<float>();
  p.n = n;
  p.s = s;
  p.round_bf16 = true;
  scale_values(p, stream.get());
  auto convert = [&](const void* src, ActPrecision sp, void* dst, ActPrecision dp) {
    ConvertParams c;
    c.src = src;
    c.src_precision = sp;
    c.dst = dst;
    c.dst_precision = dp;
    c.n = n;
    convert_values(c, stream.get());
  };
  auto round_in_place = [&] {
    convert(steps.data(), ActPrecision::kF32, tmp.data(), ActPrecision::kBF16);
    convert(tmp.data(), ActPrecision::kBF16, steps.data(), ActPrecision::kF32);
  };
  round_in_place();
  p.x = steps.as<float>();
  p.round_bf16 = false;
  scale_values(p, stream.get());
  round_in_place();
  const auto a = dense_test::download<float>(fused, static_cast<size_t>(n), stream.get());
  const auto b = dense_test::download<float>(steps, static_cast<size_t>(n), stream.get());
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = bf16_to_float(bf16_from_float(x[static_cast<size_t>(i)]));
    const float want = bf16_to_float(bf16_from_float(v * s));
    bad += dense_test::float_bits(a[static_cast<size_t>(i)]) != dense_test::float_bits(want);
    bad += dense_test::float_bits(b[static_cast<size_t>(i)]) != dense_test::float_bits(want);
  }
  EXPECT_EQ(bad, 0);
}

TEST(ConvertValuesGpu, NarrowRoundsToNearestEvenWidenIsExact) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Stream stream;
  const int64_t n = 100003;
  std::vector<float> x = dense_test::random_normal(static_cast<size_t>(n), 41, 3.0f);
  x[0] = 1.0f + 0x1p-8f;      // a tie: to 1
  x[1] = 1.0f + 3 * 0x1p-8f;  // a tie: to 1 + 2^-6
  x[2] = -0.0f;
  x[3] = 3.0e38f;  // past the bf16 range: +inf
  DeviceBuffer src = dense_test::upload(x, stream.get());
  DeviceBuffer narrow(static_cast<size_t>(n) * 2, "bf16");
  DeviceBuffer wide(static_cast<size_t>(n) * 4, "fp32");
  auto convert = [&](const DeviceBuffer& from, ActPrecision fp, DeviceBuffer& to, ActPrecision tp) {
    ConvertParams c;
    c.src = from.data();
    c.src_precision = fp;
    c.dst = to.data();
    c.dst_precision = tp;
    c.n = n;
    convert_values(c, stream.get());
  };
  convert(src, ActPrecision::kF32, narrow, ActPrecision::kBF16);
  convert(narrow, ActPrecision::kBF16, wide, ActPrecision::kF32);
  const auto bits = dense_test::download<uint16_t>(narrow, static_cast<size_t>(n), stream.get());
  const auto back = dense_test::download<float>(wide, static_cast<size_t>(n), stream.get());
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t want = bf16_from_float(x[static_cast<size_t>(i)]);
    bad += bits[static_cast<size_t>(i)] != want;
    bad += dense_test::float_bits(back[static_cast<size_t>(i)]) !=
           dense_test::float_bits(bf16_to_float(want));
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 0x1p-6f);
}

TEST(ScaleValuesErrors, NullWithElementsIsRejected) {
  ScaleParams p;
  p.n = 4;
  EXPECT_THROW(scale_values(p, nullptr), Error);
  p.n = 0;
  EXPECT_NO_THROW(scale_values(p, nullptr));  // nothing to do, no launch
}

}  // namespace
}  // namespace di::scale_test
