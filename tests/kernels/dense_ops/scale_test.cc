// The in-place fp32 scale (kernels/cuda/ops/scale.cuh) against the CPU's `v = v * s`: bitwise.

#include "kernels/cuda/ops/scale.cuh"

#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/device.h"
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

TEST(ScaleValuesErrors, NullWithElementsIsRejected) {
  ScaleParams p;
  p.n = 4;
  EXPECT_THROW(scale_values(p, nullptr), Error);
  p.n = 0;
  EXPECT_NO_THROW(scale_values(p, nullptr));  // nothing to do, no launch
}

}  // namespace
}  // namespace di::scale_test
