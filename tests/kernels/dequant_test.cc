// CUDA dequantization kernels against the CPU references (common/block_dequant.h), bit for bit.

#include "kernels/cuda/dequant.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/block_dequant.h"
#include "common/error.h"
#include "common/fp4.h"
#include "common/fp8.h"

namespace di {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed, int lo = 0, int hi = 255) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  if (lo == 0 && hi == 255) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t r = rng();
      std::memcpy(v.data() + i, &r, 8);
    }
    for (; i < n; ++i)
      v[i] = static_cast<uint8_t>(rng());
    return v;
  }
  std::uniform_int_distribution<int> dist(lo, hi);
  for (auto& b : v)
    b = static_cast<uint8_t>(dist(rng));
  return v;
}

ConstTensorView view(const std::vector<uint8_t>& v, DType dtype, Shape shape) {
  return {reinterpret_cast<const std::byte*>(v.data()), dtype, std::move(shape)};
}

// Index of the first differing element, or -1.
int64_t first_mismatch(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

class DequantCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU parity test skipped";
  }

  // Runs the kernel on copies of weight/scale placed `misalign` bytes past a 256-byte aligned
  // allocation, into an output poisoned with 0xFF bytes (bf16 0xFFFF, a NaN no conversion
  // produces), and returns the output.
  template <typename Params, typename Launch>
  std::vector<uint16_t> run(const std::vector<uint8_t>& w, const std::vector<uint8_t>& s,
                            size_t out_elems, size_t misalign, Params p, Launch launch) {
    Stream stream;
    DeviceBuffer wd(w.size() + misalign, "test weight");
    DeviceBuffer sd(s.size(), "test scale");
    DeviceBuffer od(out_elems * 2 + misalign * 2, "test out");
    wd.copy_from_host_async(w.data(), w.size(), stream.get(), misalign);
    sd.copy_from_host_async(s.data(), s.size(), stream.get());
    od.fill_async(0xFF, stream.get());
    p.weight = wd.as<uint8_t>() + misalign;
    p.scale = sd.as<uint8_t>();
    p.out_bf16 = od.as<uint16_t>() + misalign;
    launch(p, stream.get());
    std::vector<uint16_t> out(out_elems);
    od.copy_to_host_async(out.data(), out_elems * 2, stream.get(), misalign * 2);
    stream.synchronize();
    return out;
  }

  void check_fp8(int64_t n, int64_t k, int bn, int bk, uint64_t seed, size_t misalign = 0) {
    SCOPED_TRACE(testing::Message() << "fp8 [" << n << ", " << k << "] blocks " << bn << "x" << bk
                                    << " misalign " << misalign);
    const Shape scale_shape = fp8_block_scale_shape(n, k, bn, bk);
    const auto w = random_bytes(static_cast<size_t>(n * k), seed);
    const auto s = random_bytes(static_cast<size_t>(scale_shape.numel()), seed + 1,
                                kFp8Bf16ExactMinScale, kFp8Bf16ExactMaxScale);
    std::vector<uint16_t> expected(static_cast<size_t>(n * k));
    dequant_fp8_blocks_bf16(view(w, DType::kF8E4M3, {n, k}), view(s, DType::kF8E8M0, scale_shape),
                            bn, bk, expected);
    DequantFp8Params p;
    p.n = n;
    p.k = k;
    p.bn = bn;
    p.bk = bk;
    const auto got = run(w, s, expected.size(), misalign, p, dequant_fp8_to_bf16);
    const int64_t bad = first_mismatch(got, expected);
    EXPECT_EQ(bad, -1) << "first mismatch at [" << bad / k << ", " << bad % k << "]: got 0x"
                       << std::hex << got[bad] << ", expected 0x" << expected[bad];
  }

  void check_fp4(int64_t n, int64_t k, uint64_t seed, size_t misalign = 0) {
    SCOPED_TRACE(testing::Message() << "fp4 [" << n << ", " << k << "] misalign " << misalign);
    const Shape scale_shape = fp4_row_scale_shape(n, k);
    const auto w = random_bytes(static_cast<size_t>(n * k / 2), seed);
    const auto s =
        random_bytes(static_cast<size_t>(scale_shape.numel()), seed + 1, 0, kFp4Bf16ExactMaxScale);
    std::vector<uint16_t> expected(static_cast<size_t>(n * k));
    dequant_fp4_rows_bf16(view(w, DType::kI8, {n, k / 2}), view(s, DType::kF8E8M0, scale_shape),
                          expected);
    DequantFp4Params p;
    p.n = n;
    p.k = k;
    const auto got = run(w, s, expected.size(), misalign, p, dequant_fp4_to_bf16);
    const int64_t bad = first_mismatch(got, expected);
    EXPECT_EQ(bad, -1) << "first mismatch at [" << bad / k << ", " << bad % k << "]: got 0x"
                       << std::hex << got[bad] << ", expected 0x" << expected[bad];
  }
};

// V4.1 shapes, 32x32 blocks.
TEST_F(DequantCudaTest, Fp8WqB) {
  check_fp8(32768, 1280, 32, 32, 1);
}
TEST_F(DequantCudaTest, Fp8WoB) {
  check_fp8(5120, 8192, 32, 32, 2);
}
// V4 shape, 128x128 blocks.
TEST_F(DequantCudaTest, Fp8V4Blocks128) {
  check_fp8(4096, 2048, 128, 128, 3);
}
// Engram table rows, 1x32 blocks.
TEST_F(DequantCudaTest, Fp8EngramRows) {
  check_fp8(4099, 1024, 1, 32, 4);
}

TEST_F(DequantCudaTest, Fp8OddShapes) {
  check_fp8(33, 47, 32, 32, 5);      // K not a multiple of 16: scalar path
  check_fp8(129, 130, 128, 128, 6);  // ragged blocks in both directions
  check_fp8(7, 100, 1, 32, 7);
  check_fp8(45, 96, 32, 32, 8);  // vector path with a ragged last row block
  check_fp8(1, 1, 32, 32, 9);
  check_fp8(64, 64, 32, 32, 10, /*misalign=*/1);  // unaligned pointers: scalar path
}

// Every e4m3 code with every scale byte, including the ones outside the bf16-exact range and NaN:
// the kernel must match the shared scalar codec step bit for bit everywhere.
TEST_F(DequantCudaTest, Fp8AllCodesAllScales) {
  std::vector<uint8_t> w(256 * 256);
  std::vector<uint8_t> s(256);
  for (int r = 0; r < 256; ++r) {
    s[static_cast<size_t>(r)] = static_cast<uint8_t>(r);
    for (int c = 0; c < 256; ++c)
      w[static_cast<size_t>(r * 256 + c)] = static_cast<uint8_t>(c);
  }
  std::vector<uint16_t> expected(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    expected[i] = e4m3_scaled_to_bf16(w[i], e8m0_to_float(s[i / 256]));
  }
  DequantFp8Params p;
  p.n = 256;
  p.k = 256;
  p.bn = 1;
  p.bk = 256;
  for (size_t misalign : {0, 1}) {  // vector and scalar paths
    const auto got = run(w, s, expected.size(), misalign, p, dequant_fp8_to_bf16);
    const int64_t bad = first_mismatch(got, expected);
    EXPECT_EQ(bad, -1) << "misalign " << misalign << ": code " << bad % 256 << " scale "
                       << bad / 256 << ": got 0x" << std::hex << got[bad] << ", expected 0x"
                       << expected[bad];
  }
}

// MoE expert w1 [2304, 5120] in FP4.
TEST_F(DequantCudaTest, Fp4ExpertW1) {
  check_fp4(2304, 5120, 11);
}
TEST_F(DequantCudaTest, Fp4ExpertW2) {
  check_fp4(5120, 2304, 12);
}

TEST_F(DequantCudaTest, Fp4OddShapes) {
  check_fp4(3, 70, 13);  // K not a multiple of 16: scalar path, ragged last block
  check_fp4(9, 48, 17);  // vector path with a ragged (16-element) last block
  check_fp4(17, 2, 14);
  check_fp4(5, 64, 15, /*misalign=*/1);  // unaligned pointers: scalar path
  check_fp4(1, 32, 16);
}

TEST_F(DequantCudaTest, Fp4AllCodesAllScales) {
  // Row r: scale byte r; 32 elements: codes 0..15 twice.
  std::vector<uint8_t> w(256 * 16);
  std::vector<uint8_t> s(256);
  std::vector<uint16_t> expected(256 * 32);
  for (int r = 0; r < 256; ++r) {
    s[static_cast<size_t>(r)] = static_cast<uint8_t>(r);
    for (int j = 0; j < 16; ++j) {
      const auto even = static_cast<uint8_t>((2 * j) % 16);
      const auto odd = static_cast<uint8_t>((2 * j + 1) % 16);
      w[static_cast<size_t>(r * 16 + j)] = pack_e2m1(even, odd);
      const float scale = e8m0_to_float(static_cast<uint8_t>(r));
      expected[static_cast<size_t>(r * 32 + 2 * j)] = e2m1_scaled_to_bf16(even, scale);
      expected[static_cast<size_t>(r * 32 + 2 * j + 1)] = e2m1_scaled_to_bf16(odd, scale);
    }
  }
  DequantFp4Params p;
  p.n = 256;
  p.k = 32;
  for (size_t misalign : {0, 1}) {
    const auto got = run(w, s, expected.size(), misalign, p, dequant_fp4_to_bf16);
    const int64_t bad = first_mismatch(got, expected);
    EXPECT_EQ(bad, -1) << "misalign " << misalign << ": element " << bad << ": got 0x" << std::hex
                       << got[bad] << ", expected 0x" << expected[bad];
  }
}

// Parameter validation happens on the host before any CUDA call: no device needed.
TEST(DequantLauncherTest, RejectsBadParams) {
  uint8_t byte = 0;
  uint16_t out = 0;
  DequantFp8Params p8{&byte, &byte, 1, 1, 0, 32, &out};
  EXPECT_THROW(dequant_fp8_to_bf16(p8, nullptr), Error);  // bn = 0
  p8.bn = 32;
  p8.scale = nullptr;
  EXPECT_THROW(dequant_fp8_to_bf16(p8, nullptr), Error);
  p8.n = -1;
  EXPECT_THROW(dequant_fp8_to_bf16(p8, nullptr), Error);

  DequantFp4Params p4{&byte, &byte, 1, 3, &out};
  try {
    dequant_fp4_to_bf16(p4, nullptr);
    ADD_FAILURE() << "odd k accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k must be even"), std::string::npos) << e.what();
  }
  p4.k = 2;
  p4.out_bf16 = nullptr;
  EXPECT_THROW(dequant_fp4_to_bf16(p4, nullptr), Error);
}

TEST(DequantLauncherTest, EmptyShapesLaunchNothing) {
  // No pointers needed and no CUDA call made for empty tensors.
  EXPECT_NO_THROW(
      dequant_fp8_to_bf16(DequantFp8Params{nullptr, nullptr, 0, 128, 32, 32, nullptr}, nullptr));
  EXPECT_NO_THROW(dequant_fp4_to_bf16(DequantFp4Params{nullptr, nullptr, 16, 0, nullptr}, nullptr));
}

}  // namespace
}  // namespace di
