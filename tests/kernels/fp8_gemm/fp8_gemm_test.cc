// The CUDA FP8 block-scaled GEMM (kernels/cuda/fp8_gemm) against the CPU reference:
// cpu::act_quant_e4m3 on each row, block-dequantised e4m3 weights, and per K-block fp64 dot
// products scaled by s_w — the GPU's scaling order, with only the summation precision differing.
// Real V4.1 (32x32 blocks) and V4-Flash (128x128) shapes, fresh random inputs, poisoned outputs,
// and bitwise row equality across batch sizes. Skips without a CUDA device.

#include "kernels/cuda/fp8_gemm/fp8_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/fp8.h"
#include "kernels/cpu/quant.h"

namespace di {
namespace {

struct GemmShape {
  const char* name;
  int64_t n;
  int64_t k;
  int block;
};

// V4.1 (dim 5120, q_lora 1280, 64 x 512 heads, o 8 x 1024, shared expert 2304) and V4-Flash
// (dim 4096, q_lora 1024, 128 x 128 blocks) weights from model/weight_catalogue.cc.
constexpr GemmShape kShapes[] = {
    {"v41_wq_a", 1280, 5120, 32},       {"v41_wq_b", 32768, 1280, 32},
    {"v41_wkv", 512, 5120, 32},         {"v41_wo_b", 5120, 8192, 32},
    {"v41_shared_w13", 2304, 5120, 32}, {"v41_shared_w2", 5120, 2304, 32},
    {"v4_wq_a", 1024, 4096, 128},       {"v4_wo_b", 4096, 8192, 128},
};

struct Weight {
  int64_t n = 0, k = 0;
  int block = 0;
  std::vector<uint8_t> codes;  // [n, k] e4m3
  std::vector<uint8_t> scale;  // [ceil(n/B), ceil(k/B)] ue8m0
};

Weight random_weight(int64_t n, int64_t k, int block, uint64_t seed) {
  Weight w{n, k, block, {}, {}};
  std::mt19937_64 rng(seed);
  w.codes.resize(static_cast<size_t>(n * k));
  for (auto& c : w.codes) {
    auto b = static_cast<uint8_t>(rng());
    if (e4m3_is_nan(b)) b = static_cast<uint8_t>(b - 1);  // finite codes only
    c = b;
  }
  const int64_t sr = (n + block - 1) / block;
  const int64_t sc = (k + block - 1) / block;
  std::uniform_int_distribution<int> sd(118, 126);  // 2^-9 .. 2^-1, like the checkpoint's
  w.scale.resize(static_cast<size_t>(sr * sc));
  for (auto& s : w.scale)
    s = static_cast<uint8_t>(sd(rng));
  return w;
}

// Activations [m, k]: normal values with a per-row magnitude 2^[-6, 6]; a few rows below the
// 1e-4 amax floor. bf16 inputs hold bf16-representable values.
std::vector<float> random_x(int64_t m, int64_t k, bool bf16, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(-6, 6);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    const float mag = r % 97 == 5 ? 1e-6f : std::ldexp(1.0f, ed(rng));
    for (int64_t c = 0; c < k; ++c) {
      float v = nd(rng) * mag;
      if (bf16) v = bf16_to_float(bf16_from_float(v));
      x[static_cast<size_t>(r * k + c)] = v;
    }
  }
  return x;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    b[i] = bf16_from_float(x[i]);
  return b;
}

// Reference rows: y[r, c] = sum_kb s_w[c/B, kb] * sum_{k in kb} xq[r, k] * w[c, k] in fp64, with
// xq = act_quant_e4m3<float>(x[r]) (q * s_x, exact). abs_sum[r, c] = the same with |terms|.
struct Reference {
  std::vector<double> y;        // [rows.size(), n]
  std::vector<double> abs_sum;  // [rows.size(), n]
};

Reference reference_rows(const std::vector<float>& x, int64_t k, const Weight& w,
                         const std::vector<int64_t>& rows) {
  float lut[256];
  for (int i = 0; i < 256; ++i)
    lut[i] = e4m3_to_float(static_cast<uint8_t>(i));
  const int64_t nkb = (k + w.block - 1) / w.block;
  Reference ref;
  ref.y.assign(rows.size() * static_cast<size_t>(w.n), 0.0);
  ref.abs_sum.assign(rows.size() * static_cast<size_t>(w.n), 0.0);
  const unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  auto work = [&](unsigned tid) {
    std::vector<float> xq(static_cast<size_t>(k));
    for (size_t i = tid; i < rows.size(); i += threads) {
      std::copy_n(x.begin() + rows[i] * k, k, xq.begin());
      cpu::act_quant_e4m3<float>(std::span<float>(xq), w.block);
      for (int64_t c = 0; c < w.n; ++c) {
        const uint8_t* wc = w.codes.data() + c * k;
        double y = 0.0;
        double a = 0.0;
        for (int64_t kb = 0; kb < nkb; ++kb) {
          double part = 0.0;
          double apart = 0.0;
          const int64_t k1 = std::min(k, (kb + 1) * w.block);
          for (int64_t kk = kb * w.block; kk < k1; ++kk) {
            const double t = static_cast<double>(xq[kk]) * lut[wc[kk]];
            part += t;
            apart += std::fabs(t);
          }
          const double sw = e8m0_to_double(w.scale[(c / w.block) * nkb + kb]);
          y += part * sw;
          a += apart * sw;
        }
        ref.y[i * w.n + c] = y;
        ref.abs_sum[i * w.n + c] = a;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back(work, t);
  for (auto& t : pool)
    t.join();
  return ref;
}

class Fp8GemmCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU parity test skipped";
    info_ = device_info(0);
    if (info_.sm_major != 9) GTEST_SKIP() << "FP8 GEMM kernels are built for sm_90a only";
  }

  // Runs the GEMM on x [m, k] (bf16 or fp32) and returns the output as floats [m, n]. The output
  // buffer is poisoned with NaN (all-ones bytes) first.
  std::vector<float> run(const std::vector<float>& x, int64_t m, const Weight& w, bool x_bf16,
                         bool out_bf16, Fp8GemmPlan* plan_out = nullptr) {
    const int64_t k = w.k;
    Stream stream;
    DeviceBuffer d_w(w.codes.size(), "test weight");
    DeviceBuffer d_s(w.scale.size(), "test weight scale");
    d_w.copy_from_host_async(w.codes.data(), w.codes.size(), stream.get());
    d_s.copy_from_host_async(w.scale.data(), w.scale.size(), stream.get());
    std::vector<uint16_t> xb;
    DeviceBuffer d_x(static_cast<size_t>(m * k) * (x_bf16 ? 2 : 4), "test x");
    if (x_bf16) {
      xb = to_bf16(x);
      d_x.copy_from_host_async(xb.data(), d_x.size(), stream.get());
    } else {
      d_x.copy_from_host_async(x.data(), d_x.size(), stream.get());
    }
    const size_t out_elt = out_bf16 ? 2 : 4;
    DeviceBuffer d_out(static_cast<size_t>(m * w.n) * out_elt, "test out");
    d_out.fill_async(0xFF, stream.get());
    const size_t ws_bytes = fp8_gemm_workspace_bytes(m, k, w.block);
    DeviceBuffer d_ws(ws_bytes, "test workspace");
    const Fp8GemmPlan plan =
        plan_fp8_gemm(m, w.n, k, w.block, info_.sm_count, info_.sm_major, info_.sm_minor);
    if (plan_out != nullptr) *plan_out = plan;
    Fp8GemmParams p;
    p.x = d_x.data();
    p.x_dtype = x_bf16 ? Fp8ActDtype::kBf16 : Fp8ActDtype::kF32;
    p.weight = d_w.as<uint8_t>();
    p.weight_scale = d_s.as<uint8_t>();
    p.m = m;
    p.n = w.n;
    p.k = k;
    p.block = w.block;
    p.out = d_out.data();
    p.out_dtype = out_bf16 ? Fp8OutDtype::kBf16 : Fp8OutDtype::kF32;
    p.workspace = d_ws.data();
    p.workspace_bytes = ws_bytes;
    fp8_gemm(p, plan, stream.get());
    std::vector<float> y(static_cast<size_t>(m * w.n));
    if (out_bf16) {
      std::vector<uint16_t> yb(y.size());
      d_out.copy_to_host_async(yb.data(), d_out.size(), stream.get());
      stream.synchronize();
      for (size_t i = 0; i < y.size(); ++i)
        y[i] = bf16_to_float(yb[i]);
    } else {
      d_out.copy_to_host_async(y.data(), d_out.size(), stream.get());
      stream.synchronize();
    }
    return y;
  }

  // A shape's parity at every batch size (the model shapes' and the ragged shapes' tests).
  void check_parity(const GemmShape& shape, uint64_t& seed);

  DeviceInfo info_;
};

TEST_F(Fp8GemmCudaTest, ActQuantMatchesCpuBitForBit) {
  for (const int block : {32, 128}) {
    for (const bool bf16 : {true, false}) {
      const int64_t m = 37;
      const int64_t k = 5120;
      std::vector<float> x = random_x(m, k, bf16, 11 + static_cast<uint64_t>(block) + bf16);
      x[3] = 0.0f;  // a zero, a tie-heavy power of two and a large value
      x[4] = 448.0f;
      x[5] = bf16 ? 1.0e30f : 3.0e38f;
      if (bf16) x[5] = bf16_to_float(bf16_from_float(x[5]));
      Stream stream;
      const std::vector<uint16_t> xb = to_bf16(x);
      DeviceBuffer d_x(static_cast<size_t>(m * k) * (bf16 ? 2 : 4), "x");
      d_x.copy_from_host_async(bf16 ? static_cast<const void*>(xb.data()) : x.data(), d_x.size(),
                               stream.get());
      const int64_t nkb = k / block;
      DeviceBuffer d_q(static_cast<size_t>(m * k), "q");
      DeviceBuffer d_s(static_cast<size_t>(m * nkb), "s");
      fp8_act_quant({d_x.data(), bf16 ? Fp8ActDtype::kBf16 : Fp8ActDtype::kF32, m, k, block,
                     d_q.as<uint8_t>(), d_s.as<uint8_t>()},
                    stream.get());
      std::vector<uint8_t> q(d_q.size());
      std::vector<uint8_t> s(d_s.size());
      d_q.copy_to_host_async(q.data(), q.size(), stream.get());
      d_s.copy_to_host_async(s.data(), d_s.size(), stream.get());
      stream.synchronize();
      std::vector<float> ref = x;
      for (int64_t r = 0; r < m; ++r)
        cpu::act_quant_e4m3<float>(std::span<float>(ref.data() + r * k, static_cast<size_t>(k)),
                                   block);
      int64_t bad = 0;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float got =
              e4m3_to_float(q[static_cast<size_t>(r * k + c)]) *
              static_cast<float>(e8m0_to_double(s[static_cast<size_t>(r * nkb + c / block)]));
          const float want = ref[static_cast<size_t>(r * k + c)];
          if (std::memcmp(&got, &want, 4) != 0 && !(got == 0.0f && want == 0.0f)) ++bad;
        }
      }
      EXPECT_EQ(bad, 0) << "block " << block << (bf16 ? " bf16" : " fp32") << " input";
    }
  }
}

// Parity on every shape and batch size. Rows checked against the reference: all for m <= 64,
// 40 spread rows (first and last included) above; every element is checked to be written.
// Tolerance per element: |gpu - ref| <= 2^-9 * abs_sum (+ half a bf16 ulp of |ref| for bf16
// output). abs_sum = sum_kb s_w * sum |x_q * w| bounds the rounding of the per-block tensor-core
// partials (fp8 wgmma keeps ~13+ bits when adding its 32 exact products: at most 32 * 2^-14 of the
// block's largest term) and of the fp32 promotion across K-blocks (<= num_kb * 2^-24 relative).
TEST_F(Fp8GemmCudaTest, MatchesCpuReferenceOnModelShapes) {
  uint64_t seed = 1000;
  for (const GemmShape& shape : kShapes)
    check_parity(shape, seed);
}

// Shapes off the model's grid: n not a multiple of 64 or of the block (padding weight rows and a
// partial last scale row), k not a multiple of 128 or of the block (a partial last stage and
// K-block; num_kb % 4 != 0, so the scale bytes are loaded one by one, not as words).
TEST_F(Fp8GemmCudaTest, MatchesCpuReferenceOnRaggedShapes) {
  constexpr GemmShape kRagged[] = {{"ragged_b32", 200, 1296, 32}, {"ragged_b128", 200, 1296, 128}};
  uint64_t seed = 5000;
  for (const GemmShape& shape : kRagged)
    check_parity(shape, seed);
}

void Fp8GemmCudaTest::check_parity(const GemmShape& shape, uint64_t& seed) {
  {
    const Weight w = random_weight(shape.n, shape.k, shape.block, ++seed);
    for (const int64_t m : {1, 7, 64, 200, 1000, 4096}) {
      const bool x_bf16 = (seed + m) % 2 == 0;
      const bool out_bf16 = m % 2 == 0;
      const std::vector<float> x = random_x(m, shape.k, x_bf16, ++seed);
      Fp8GemmPlan plan;
      const std::vector<float> y = run(x, m, w, x_bf16, out_bf16, &plan);
      std::vector<int64_t> rows;
      if (m <= 64) {
        for (int64_t r = 0; r < m; ++r)
          rows.push_back(r);
      } else {
        for (int64_t i = 0; i < 40; ++i)
          rows.push_back(i * (m - 1) / 39);
      }
      const Reference ref = reference_rows(x, shape.k, w, rows);
      int64_t unwritten = 0;
      for (const float v : y)
        unwritten += std::isnan(v) ? 1 : 0;
      double worst = 0.0;  // max |err| / allowed
      double err2 = 0.0, ref2 = 0.0, worst_rel_abs = 0.0;
      for (size_t i = 0; i < rows.size(); ++i) {
        for (int64_t c = 0; c < w.n; ++c) {
          const double g = y[static_cast<size_t>(rows[i] * w.n + c)];
          const double r = ref.y[i * w.n + c];
          const double a = ref.abs_sum[i * w.n + c];
          const double allowed = 0x1p-9 * a + (out_bf16 ? 0x1p-8 * std::fabs(r) : 0.0) + 1e-30;
          const double e = std::fabs(g - r);
          worst = std::max(worst, std::isnan(e) ? 1e30 : e / allowed);
          worst_rel_abs = std::max(worst_rel_abs, a > 0 ? e / a : 0.0);
          err2 += (g - r) * (g - r);
          ref2 += r * r;
        }
      }
      const double rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-300));
      const std::string what = std::string(shape.name) + " m=" + std::to_string(m) + " tile " +
                               std::to_string(plan.block_m) + "x" + std::to_string(plan.block_n) +
                               (x_bf16 ? " x:bf16" : " x:fp32") +
                               (out_bf16 ? " out:bf16" : " out:fp32");
      std::printf("%-52s max err/abs_sum %.3e  max err/allowed %.3f  rel_l2 %.3e\n", what.c_str(),
                  worst_rel_abs, worst, rel_l2);
      EXPECT_EQ(unwritten, 0) << what;
      EXPECT_LE(worst, 1.0) << what;
      EXPECT_LT(rel_l2, out_bf16 ? 4e-3 : 1e-3) << what;
    }
  }
}

// Row-level batch invariance: the rows of a 1000-row batch computed alone or inside batches of
// 1, 7, 64, 200 and 4096 rows (at other row positions, so in other tiles and tile
// configurations: the swapped kernel, the 64-row split tiles, the 128-row prefill tiles) are
// bitwise identical. The persistent prefill kernel's three K loops are among them: wq_b (one
// K-chunk), wq_a, wo_b and w2 (B = 32 with K-chunks: totals in shared memory) and V4 wq_a
// (B = 128 with K-chunks: totals in registers).
TEST_F(Fp8GemmCudaTest, RowsAreBitwiseBatchInvariant) {
  const GemmShape cases[] = {kShapes[0], kShapes[1], kShapes[3], kShapes[5], kShapes[6]};
  uint64_t seed = 5000;
  for (const GemmShape& shape : cases) {
    const Weight w = random_weight(shape.n, shape.k, shape.block, ++seed);
    const int64_t k = shape.k;
    const int64_t big = 1000;
    const std::vector<float> x = random_x(big, k, false, ++seed);
    Fp8GemmPlan big_plan;
    const std::vector<float> y_big = run(x, big, w, false, false, &big_plan);
    struct Sub {
      int64_t m;
      int64_t first;  // the sub-batch holds rows [first, first + m) of x...
      int64_t at;     // ...at rows [at, at + m) of its own batch
    };
    for (const Sub sub : {Sub{1, 517, 0}, Sub{7, 333, 0}, Sub{32, 100, 0}, Sub{64, 900, 0},
                          Sub{200, 700, 0}, Sub{4096, 0, 1500}}) {
      const int64_t rows = std::min<int64_t>(sub.m, big - sub.first);
      std::vector<float> xs = random_x(sub.m, k, false, ++seed);
      std::copy_n(x.begin() + sub.first * k, rows * k, xs.begin() + sub.at * k);
      Fp8GemmPlan plan;
      const std::vector<float> ys = run(xs, sub.m, w, false, false, &plan);
      int64_t diff = 0;
      for (int64_t r = 0; r < rows; ++r) {
        diff += std::memcmp(ys.data() + (sub.at + r) * w.n, y_big.data() + (sub.first + r) * w.n,
                            static_cast<size_t>(w.n) * 4) != 0
                    ? 1
                    : 0;
      }
      std::printf("%s: m=%lld (tile %dx%d) vs m=1000 (tile %dx%d): %lld of %lld rows differ\n",
                  shape.name, static_cast<long long>(sub.m), plan.block_m, plan.block_n,
                  big_plan.block_m, big_plan.block_n, static_cast<long long>(diff),
                  static_cast<long long>(rows));
      EXPECT_EQ(diff, 0) << shape.name << " m=" << sub.m;
    }
  }
}

// The plans of every model shape fit the shared memory of an H200 (132 SMs, sm_90) at decode and
// prefill sizes (host only: runs without a GPU).
TEST(Fp8GemmPlan, ModelShapesFitSharedMemory) {
  for (const GemmShape& shape : kShapes) {
    for (const int64_t m : {1, 8, 9, 16, 17, 32, 33, 64, 65, 256, 257, 4096}) {
      Fp8GemmPlan plan;
      EXPECT_NO_THROW(plan = plan_fp8_gemm(m, shape.n, shape.k, shape.block, 132, 9, 0))
          << shape.name << " m=" << m;
      EXPECT_GT(plan.smem_bytes, 0) << shape.name << " m=" << m;
      EXPECT_LE(plan.smem_bytes, 227 * 1024) << shape.name << " m=" << m;
    }
  }
}

// The prefill plans (m > 256): the persistent kernel, at most one CTA per SM and never more CTAs
// than tiles; 5 stages for 32 x 32 blocks with K-chunks (their totals take the sixth's shared
// memory), else 6 (host only).
TEST(Fp8GemmPlan, PrefillKernelChoice) {
  for (const GemmShape& shape : kShapes) {
    for (const int64_t m : {257, 1000, 4096, 8192}) {
      for (const int sms : {1, 78, 132}) {
        const Fp8GemmPlan plan = plan_fp8_gemm(m, shape.n, shape.k, shape.block, sms, 9, 0);
        const std::string what =
            std::string(shape.name) + " m=" + std::to_string(m) + " sms=" + std::to_string(sms);
        ASSERT_EQ(plan.block_m, 128) << what;
        const int64_t tiles = static_cast<int64_t>(plan.grid_m) * plan.grid_n;
        EXPECT_EQ(plan.grid_m, static_cast<unsigned>((m + 127) / 128)) << what;
        EXPECT_TRUE(plan.persistent) << what;
        EXPECT_EQ(plan.stages, shape.block == 32 && plan.num_chunks > 1 ? 5 : 6) << what;
        EXPECT_EQ(static_cast<int64_t>(plan.ctas), std::min<int64_t>(tiles, sms)) << what;
        EXPECT_LE(plan.smem_bytes, 227 * 1024) << what;
      }
    }
  }
}

}  // namespace
}  // namespace di
