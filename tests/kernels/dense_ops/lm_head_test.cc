// The LM head on the GPU against cpu::linear<float> on the real [129,280, 5,120] bf16 weight,
// with poisoned outputs (3 rows: the plain kernel; 40 rows: the tiled one), and the bitwise batch
// invariance of its rows (M in {1, 7, 64, 1000}: both kernels);
// the dim % 256 != 0 kernel at the fixture models' small dims (192, 64, an odd 67); the
// tensor-core kernel and lm_head's choice between the kernel families.
//
// Tolerance (CUDA-core kernels): the GPU sums k in a lane-strided tree, the CPU sequentially,
// both in fp32: |gpu - cpu| <= 2e-5 * max|logit| per element and a normwise relative error
// <= 2e-6. The tensor-core kernel: the same per-element bound; normwise <= 4e-5 (its MMAs
// accumulate with truncation: 1.7e-5 measured on the H200).

#include "kernels/cuda/ops/lm_head.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "core/tensor_view.h"
#include "kernels/cpu/linear.h"
#include "kernels/dense_ops/dense_ops_test_util.h"

namespace di {
namespace {

using namespace dense_test;  // NOLINT

constexpr int64_t kVocab = 129280;
constexpr int64_t kDim = 5120;

class LmHeadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DI_REQUIRE_GPU();
    stream_.emplace();
    if (!weight_)
      weight_ = std::make_unique<DeviceBuffer>(upload(big_table(), stream_->get(), "head"));
  }
  static void TearDownTestSuite() { weight_.reset(); }

  // The head `launcher` (a kernel family, or lm_head's dispatch) into poisoned logits of row stride
  // `stride` (0: vocab).
  using Launcher = void (*)(const LmHeadParams&, cudaStream_t);
  std::vector<float> run(const DeviceBuffer& xd, int64_t rows, ActPrecision xp = ActPrecision::kF32,
                         int64_t stride = 0, Launcher launcher = lm_head_cuda_core) {
    const int64_t row_stride = stride != 0 ? stride : kVocab;
    DeviceBuffer out = poisoned<float>(static_cast<size_t>(rows * row_stride), stream_->get());
    LmHeadParams p;
    p.x = xd.data();
    p.x_precision = xp;
    p.weight = weight_->as<uint16_t>();
    p.logits = out.as<float>();
    p.rows = rows;
    p.vocab = kVocab;
    p.dim = kDim;
    p.logits_stride = stride;
    launcher(p, stream_->get());
    return download<float>(out, static_cast<size_t>(rows * row_stride), stream_->get());
  }

  std::optional<Stream> stream_;  // created once a device is known to exist
  static std::unique_ptr<DeviceBuffer> weight_;
};

std::unique_ptr<DeviceBuffer> LmHeadTest::weight_;

// 3 rows (the plain kernel) and 40 rows (the 16-row tiled kernel, a partial last tile).
TEST_F(LmHeadTest, MatchesCpuLinear) {
  const auto& table = big_table();
  const cpu::WeightRef w =
      cpu::dense_weight(ConstTensorView{reinterpret_cast<const std::byte*>(table.data()),
                                        DType::kBF16, Shape{kVocab, kDim}},
                        "head.weight");
  for (const int64_t rows : {int64_t{3}, int64_t{40}}) {
    const auto x = random_normal(static_cast<size_t>(rows * kDim), 5, 1.0f);
    const DeviceBuffer xd = upload(x, stream_->get());
    const auto got = run(xd, rows);
    std::vector<float> ref(static_cast<size_t>(rows * kVocab));
    cpu::linear<float>(x.data(), rows, w, ref.data());
    double max_abs = 0, err2 = 0, ref2 = 0, max_err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << "unwritten logit " << i << " (" << rows << " rows)";
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(ref[i])));
      const double e = static_cast<double>(got[i]) - ref[i];
      max_err = std::max(max_err, std::fabs(e));
      err2 += e * e;
      ref2 += static_cast<double>(ref[i]) * ref[i];
    }
    EXPECT_LE(max_err, 2e-5 * max_abs) << rows << " rows";
    EXPECT_LE(std::sqrt(err2 / ref2), 2e-6) << rows << " rows";
    RecordProperty("normwise_rel_err_" + std::to_string(rows),
                   std::to_string(std::sqrt(err2 / ref2)));
  }
}

TEST_F(LmHeadTest, RowsAreBatchInvariant) {
  const int64_t max_rows = 1000;
  const auto x = random_normal(static_cast<size_t>(max_rows * kDim), 6, 1.0f);
  const DeviceBuffer xd = upload(x, stream_->get());
  const auto full = run(xd, max_rows);
  // 1000 and 64 rows run the tiled kernel, 7 and 1 the plain one: the same bits.
  for (const int64_t m : {int64_t{64}, int64_t{7}, int64_t{1}}) {
    const auto part = run(xd, m);
    EXPECT_EQ(std::memcmp(part.data(), full.data(), part.size() * 4), 0)
        << "rows of an M = " << m << " batch differ from the same rows at M = 1000";
  }
}

// bf16 activations (the bf16 precision's router and head input) are widened exactly on load:
// bitwise the logits of the same values given as fp32, on the plain (1, 7 rows) and the tiled
// (40 rows) kernels.
TEST_F(LmHeadTest, Bf16InputIsTheSameAsItsFp32Widening) {
  const int64_t rows = 40;
  const std::vector<uint16_t> xb =
      to_bf16(random_normal(static_cast<size_t>(rows * kDim), 8, 1.0f));
  const std::vector<float> xf = from_bf16(xb);
  const DeviceBuffer xbd = upload(xb, stream_->get()), xfd = upload(xf, stream_->get());
  for (const int64_t m : {int64_t{1}, int64_t{7}, rows}) {
    const auto a = run(xbd, m, ActPrecision::kBF16);
    const auto b = run(xfd, m);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << m << " rows";
  }
}

// The tensor-core head (lm_head_tensor_core): against cpu::linear<float> (every product exact,
// the MMA's truncating fp32 accumulation in another order; see the tolerances at the top), rows
// bitwise batch-invariant (M = 1, 7, 64 against M = 1000, across the 64-row tiles), bf16 input
// bitwise the fp32 input of the same values, and a logits row stride with its gaps left unwritten.
TEST_F(LmHeadTest, TensorCoreMatchesCpuAndIsBatchInvariant) {
  auto run_tc = [&](const DeviceBuffer& xd, int64_t rows, ActPrecision xp, int64_t stride) {
    return run(xd, rows, xp, stride, lm_head_tensor_core);
  };
  const auto& table = big_table();
  const cpu::WeightRef w =
      cpu::dense_weight(ConstTensorView{reinterpret_cast<const std::byte*>(table.data()),
                                        DType::kBF16, Shape{kVocab, kDim}},
                        "head.weight");
  const int64_t rows = 70, stride = kVocab + 5;
  const auto x = random_normal(static_cast<size_t>(rows * kDim), 9, 1.0f);
  const DeviceBuffer xd = upload(x, stream_->get());
  const auto got = run_tc(xd, rows, ActPrecision::kF32, stride);
  std::vector<float> ref(static_cast<size_t>(rows * kVocab));
  cpu::linear<float>(x.data(), rows, w, ref.data());
  double max_abs = 0, err2 = 0, ref2 = 0, max_err = 0;
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < kVocab; ++n) {
      const float g = got[static_cast<size_t>(m * stride + n)];
      ASSERT_FALSE(std::isnan(g)) << "unwritten logit " << m << ", " << n;
      const double r = ref[static_cast<size_t>(m * kVocab + n)];
      max_abs = std::max(max_abs, std::fabs(r));
      max_err = std::max(max_err, std::fabs(g - r));
      err2 += (g - r) * (g - r);
      ref2 += r * r;
    }
    for (int64_t n = kVocab; n < stride; ++n)
      ASSERT_TRUE(std::isnan(got[static_cast<size_t>(m * stride + n)])) << "stride gap, row " << m;
  }
  EXPECT_LE(max_err, 2e-5 * max_abs);
  EXPECT_LE(std::sqrt(err2 / ref2), 4e-5);
  RecordProperty("normwise_rel_err", std::to_string(std::sqrt(err2 / ref2)));

  const int64_t big = 1000;
  const auto xb = random_normal(static_cast<size_t>(big * kDim), 10, 1.0f);
  const DeviceBuffer xbd = upload(xb, stream_->get());
  const auto full = run_tc(xbd, big, ActPrecision::kF32, kVocab);
  for (const int64_t m : {int64_t{64}, int64_t{7}, int64_t{1}}) {
    const auto part = run_tc(xbd, m, ActPrecision::kF32, kVocab);
    EXPECT_EQ(std::memcmp(part.data(), full.data(), part.size() * 4), 0)
        << "rows of an M = " << m << " batch differ from the same rows at M = 1000";
  }
  const std::vector<uint16_t> h =
      to_bf16(random_normal(static_cast<size_t>(rows * kDim), 11, 1.0f));
  const DeviceBuffer hb = upload(h, stream_->get()), hf = upload(from_bf16(h), stream_->get());
  for (const int64_t m : {int64_t{1}, rows}) {
    const auto a = run_tc(hb, m, ActPrecision::kBF16, kVocab);
    const auto b = run_tc(hf, m, ActPrecision::kF32, kVocab);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << m << " bf16 rows";
  }
}

// lm_head's one dispatch point: bf16 activations against the vocabulary head run the
// tensor-core kernel (bitwise its output at every row count), fp32 activations the CUDA-core
// kernels; small heads (the router's 384 rows) stay on the CUDA-core kernels in both precisions.
TEST_F(LmHeadTest, DispatchDependsOnTheHeadNotTheRowCount) {
  LmHeadParams p;
  p.vocab = kVocab;
  p.dim = kDim;
  p.x_precision = ActPrecision::kBF16;
  EXPECT_TRUE(lm_head_uses_tensor_cores(p));
  p.x_precision = ActPrecision::kF32;
  EXPECT_FALSE(lm_head_uses_tensor_cores(p));
  p.x_precision = ActPrecision::kBF16;
  p.vocab = 384;
  EXPECT_FALSE(lm_head_uses_tensor_cores(p));
  p.vocab = kVocab;
  p.dim = kDim + 32;
  EXPECT_FALSE(lm_head_uses_tensor_cores(p));

  const int64_t rows = 9;
  const std::vector<uint16_t> xb =
      to_bf16(random_normal(static_cast<size_t>(rows * kDim), 12, 1.0f));
  const std::vector<float> xf = from_bf16(xb);
  const DeviceBuffer xbd = upload(xb, stream_->get()), xfd = upload(xf, stream_->get());
  for (const int64_t m : {int64_t{1}, rows}) {
    const auto a = run(xbd, m, ActPrecision::kBF16, 0, lm_head);
    const auto b = run(xbd, m, ActPrecision::kBF16, 0, lm_head_tensor_core);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << m << " bf16 rows";
    const auto c = run(xfd, m, ActPrecision::kF32, 0, lm_head);
    const auto d = run(xfd, m, ActPrecision::kF32, 0, lm_head_cuda_core);
    EXPECT_EQ(std::memcmp(c.data(), d.data(), c.size() * 4), 0) << m << " fp32 rows";
  }
}

// The dim % 256 != 0 kernel (the fixture models' small projections: router gate at 192 x 12,
// compressor / indexer projections at dims like 64), with an odd dim and a logits row stride,
// and the real router's shape:
// against cpu::linear<float> (same tolerances as above) and a double dot product of the same
// bf16 weights (normwise <= 1e-6), poisoned outputs (the stride gaps stay poisoned), and bitwise
// batch invariance of the rows.
TEST(LmHeadGenericDims, MatchesCpuLinearAndIsBatchInvariant) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  struct Shape2 {
    int64_t vocab, dim;
  };
  // dim % 256 == 0 with vocab <= kLmHeadKSplitMaxVocab runs the dim-split kernel: the V4.1
  // router (384 x 5120, 37 rows in five row tiles over the grid's y), the indexer's weights
  // (32 x 5120), one chunk per CTA (4096 x 256, the largest such vocab); one more vocab row
  // (4097 x 256) runs the plain and tiled kernels.
  for (const Shape2 sh : {Shape2{12, 192}, Shape2{1280, 192}, Shape2{515, 64}, Shape2{33, 67},
                          Shape2{384, 5120}, Shape2{32, 5120}, Shape2{kLmHeadKSplitMaxVocab, 256},
                          Shape2{kLmHeadKSplitMaxVocab + 1, 512}}) {
    const int64_t rows = 37, stride = sh.vocab + 3;
    const auto wf = random_normal(static_cast<size_t>(sh.vocab * sh.dim), 40 + sh.dim, 0.1f);
    const std::vector<uint16_t> wb = to_bf16(wf);
    const auto x = random_normal(static_cast<size_t>(rows * sh.dim), 50 + sh.dim, 1.0f);
    const DeviceBuffer wd = upload(wb, st), xd = upload(x, st);
    auto run = [&](int64_t m, const DeviceBuffer* input = nullptr,
                   ActPrecision xp = ActPrecision::kF32) {
      DeviceBuffer out = poisoned<float>(static_cast<size_t>(m * stride), st);
      LmHeadParams p;
      p.x = (input != nullptr ? input : &xd)->data();
      p.x_precision = xp;
      p.weight = wd.as<uint16_t>();
      p.logits = out.as<float>();
      p.rows = m;
      p.vocab = sh.vocab;
      p.dim = sh.dim;
      p.logits_stride = stride;
      lm_head(p, st);
      return download<float>(out, static_cast<size_t>(m * stride), st);
    };
    const auto got = run(rows);

    const cpu::WeightRef w =
        cpu::dense_weight(ConstTensorView{reinterpret_cast<const std::byte*>(wb.data()),
                                          DType::kBF16, Shape{sh.vocab, sh.dim}},
                          "gate.weight");
    std::vector<float> ref(static_cast<size_t>(rows * sh.vocab));
    cpu::linear<float>(x.data(), rows, w, ref.data());
    double max_abs = 0, err2 = 0, ref2 = 0, max_err = 0, derr2 = 0, dref2 = 0;
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t n = 0; n < sh.vocab; ++n) {
        const float g = got[static_cast<size_t>(m * stride + n)];
        ASSERT_FALSE(std::isnan(g)) << "unwritten logit " << m << ", " << n << " dim " << sh.dim;
        const double r = ref[static_cast<size_t>(m * sh.vocab + n)];
        max_abs = std::max(max_abs, std::fabs(r));
        max_err = std::max(max_err, std::fabs(g - r));
        err2 += (g - r) * (g - r);
        ref2 += r * r;
        double d = 0;
        for (int64_t k = 0; k < sh.dim; ++k)
          d += static_cast<double>(x[static_cast<size_t>(m * sh.dim + k)]) *
               bf16_to_float(wb[static_cast<size_t>(n * sh.dim + k)]);
        derr2 += (g - d) * (g - d);
        dref2 += d * d;
      }
      for (int64_t n = sh.vocab; n < stride; ++n)
        ASSERT_TRUE(std::isnan(got[static_cast<size_t>(m * stride + n)]))
            << "stride gap written, row " << m;
    }
    EXPECT_LE(max_err, 2e-5 * max_abs) << "dim " << sh.dim;
    EXPECT_LE(std::sqrt(err2 / ref2), 2e-6) << "dim " << sh.dim;
    EXPECT_LE(std::sqrt(derr2 / dref2), 1e-6) << "dim " << sh.dim;
    // 1, 2, 5, 9 rows: the dim-split kernel's 1-, 2-, 4- and 8-row tiles.
    for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{9}}) {
      const auto part = run(m);
      EXPECT_EQ(std::memcmp(part.data(), got.data(), part.size() * 4), 0)
          << "rows of an M = " << m << " batch differ from the same rows at M = " << rows
          << ", dim " << sh.dim;
    }
    // bf16 input: bitwise the fp32 input of the same (widened) values.
    const std::vector<uint16_t> xb = to_bf16(x);
    const DeviceBuffer xbd = upload(xb, st), xwd = upload(from_bf16(xb), st);
    const auto from_b = run(rows, &xbd, ActPrecision::kBF16), from_f = run(rows, &xwd);
    EXPECT_EQ(std::memcmp(from_b.data(), from_f.data(), from_b.size() * 4), 0) << "dim " << sh.dim;
  }
}

TEST(LmHeadErrors, BadDimNamesTheOp) {
  LmHeadParams p;
  p.rows = 1;
  p.vocab = kVocab;
  p.dim = -5000;
  try {
    lm_head(p, nullptr);
    FAIL() << "expected di::Error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("5000"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace di
