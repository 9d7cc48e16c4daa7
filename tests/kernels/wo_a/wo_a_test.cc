// The grouped low-rank attention output projection wo_a on the GPU against the CPU reference:
// V4.1 sizes (8 groups x rank 1024 over 4096 columns of o, FP8 e4m3 weights with one UE8M0 scale
// per 32 x 32 or 128 x 128 block) at 1, 7, 64 and 300 rows, fp32 and bf16 storage, compared with a
// double-precision dot product of the exactly decoded weights (cpu::decode_rows); bitwise results
// where every partial sum is exact (fast and fallback scale paths, subnormal e4m3 codes, a NaN
// scale); small odd shapes (partial row tiles, other K splits); row-level batch invariance; the
// weights requested before the PDL wait and the activations after it; and the launcher's checks
// (without a GPU).
//
// Tolerance, per output: |got - ref| <= B = 2^-14 * sum_k |x_k * w_k|, plus 2^-8 (|ref| + B) for
// bf16 output (half a bf16 ulp of the rounded value: bf16 ratios near 1 are that rounding). The
// weights reach the tensor cores exactly and the products are exact; the error is (a) fp32 storage
// only: x = hi + lo to 2^-16 relative (<= 2^-16 * sum |x w|), and (b) the fp32 accumulation on the
// tensor cores (one or two MMAs of 16 products per 16 K-columns: 32 or 64 per K slice of 512, then
// the 8 slices added in order), each rounding or truncating to the running sum's fp32 precision:
// far below 2^-16 * sum |x w| for these data. B = 4 x 2^-16 * sum |x w| leaves room for both.

#include "kernels/cuda/wo_a/wo_a.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/error.h"
#include "core/tensor_view.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/ops/act_quant.cuh"
#include "kernels/cuda/ops/scale.cuh"
#include "tests_support/error_of.h"

namespace di {
namespace {

using dense_test::download;
using dense_test::float_bits;
using dense_test::poisoned;
using dense_test::random_normal;
using dense_test::to_bf16;
using dense_test::upload;
using test::error_of;

constexpr int64_t kG = 8;
constexpr int64_t kR = 1024;
constexpr int64_t kGw = 4096;

// Ranges of the random weights: e4m3 exponent fields [exp_lo, exp_hi] (any sign and mantissa,
// never the NaN codes) and scale bytes [scale_lo, scale_hi].
struct WeightSpec {
  int exp_lo = 0, exp_hi = 15;
  int scale_lo = 116, scale_hi = 124;
};

// A wo_a matrix [groups * rank, gw]: checkpoint bytes on the host and the device, exact decode.
struct Fp8Weight {
  int64_t groups = 0, rank = 0, gw = 0;
  int block = 32;
  std::vector<uint8_t> codes, scales;
  std::vector<float> dec;
  DeviceBuffer d_codes, d_scales;

  int64_t rows() const { return groups * rank; }
  int64_t scale_cols() const { return gw / block; }
  void decode() {
    const cpu::WeightRef ref = cpu::fp8_block_weight(
        ConstTensorView{reinterpret_cast<const std::byte*>(codes.data()), DType::kF8E4M3,
                        Shape{rows(), gw}},
        ConstTensorView{reinterpret_cast<const std::byte*>(scales.data()), DType::kF8E8M0,
                        Shape{(rows() + block - 1) / block, scale_cols()}},
        block, block, "wo_a");
    dec.resize(static_cast<size_t>(rows() * gw));
    cpu::decode_rows(ref, 0, rows(), dec.data());
  }
  void upload_to(cudaStream_t st) {
    std::vector<uint8_t> tiled(codes.size());
    pack_wo_a_weight(codes.data(), rows(), gw, tiled.data());
    d_codes = upload(tiled, st, "wo_a codes (tiled)");
    d_scales = upload(scales, st, "wo_a scales");
  }
};

Fp8Weight random_weight(int64_t groups, int64_t rank, int64_t gw, int block, uint64_t seed,
                        cudaStream_t st, const WeightSpec& spec = {}) {
  std::mt19937_64 rng(seed);
  Fp8Weight w;
  w.groups = groups;
  w.rank = rank;
  w.gw = gw;
  w.block = block;
  w.codes.resize(static_cast<size_t>(w.rows() * gw));
  const auto exps = static_cast<uint64_t>(spec.exp_hi - spec.exp_lo + 1);
  for (auto& c : w.codes) {
    uint64_t r = rng();
    uint32_t e = 0, m = 0;
    do {
      e = static_cast<uint32_t>(spec.exp_lo) + static_cast<uint32_t>(r % exps);
      m = static_cast<uint32_t>((r >> 8) & 7u);
      r = rng();
    } while (e == 15 && m == 7);  // 0x7F / 0xFF are NaN
    c = static_cast<uint8_t>(((r & 1u) << 7) | (e << 3) | m);
  }
  w.scales.resize(static_cast<size_t>((w.rows() + block - 1) / block * w.scale_cols()));
  const auto span = static_cast<uint64_t>(spec.scale_hi - spec.scale_lo + 1);
  for (auto& s : w.scales)
    s = static_cast<uint8_t>(spec.scale_lo + static_cast<int>(rng() % span));
  w.decode();
  w.upload_to(st);
  return w;
}

// Activations o [rows, groups * gw] in fp32 or bf16 storage; `val` holds the stored values.
struct Act {
  int64_t rows = 0, cols = 0;
  ActPrecision prec = ActPrecision::kF32;
  std::vector<float> val;
  DeviceBuffer d;
};

Act make_act(std::vector<float> v, int64_t rows, int64_t cols, ActPrecision prec, cudaStream_t st) {
  Act a;
  a.rows = rows;
  a.cols = cols;
  a.prec = prec;
  if (prec == ActPrecision::kBF16) {
    const std::vector<uint16_t> b = to_bf16(v);
    a.d = upload(b, st, "o bf16");
    a.val = dense_test::from_bf16(b);
  } else {
    a.d = upload(v, st, "o fp32");
    a.val = std::move(v);
  }
  return a;
}

Act random_act(int64_t rows, int64_t cols, ActPrecision prec, uint64_t seed, cudaStream_t st) {
  return make_act(random_normal(static_cast<size_t>(rows * cols), seed), rows, cols, prec, st);
}

// Small integers {-2 .. 2} times 2^xe: exact in bf16.
Act small_int_act(int64_t rows, int64_t cols, int xe, ActPrecision prec, uint64_t seed,
                  cudaStream_t st) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& x : v)
    x = std::ldexp(static_cast<float>(static_cast<int>(rng() % 5) - 2), xe);
  return make_act(std::move(v), rows, cols, prec, st);
}

// z as floats (bf16 widened); every element of the poisoned output must have been written.
// `before` (optional) runs right before the launch: it may enqueue the launch wo_a follows and
// edit the parameters.
std::vector<float> run_wo_a(const Fp8Weight& w, const Act& a, cudaStream_t st,
                            const std::function<void(WoAParams&)>& before = nullptr) {
  const auto n = static_cast<size_t>(a.rows * w.rows());
  const bool bf16 = a.prec == ActPrecision::kBF16;
  DeviceBuffer z = bf16 ? poisoned<uint16_t>(n, st) : poisoned<float>(n, st);
  WoAParams p;
  p.o = a.d.data();
  p.precision = a.prec;
  p.weight = w.d_codes.as<uint8_t>();
  p.weight_scale = w.d_scales.as<uint8_t>();
  p.block = w.block;
  p.rows = a.rows;
  p.groups = w.groups;
  p.rank = w.rank;
  p.group_width = w.gw;
  p.z = z.data();
  if (before) before(p);
  wo_a(p, st);
  if (bf16) return dense_test::from_bf16(download<uint16_t>(z, n, st));
  return download<float>(z, n, st);
}

// Reference of output (row r, column c): the double dot product and sum |x w|.
struct Ref {
  double value = 0.0, abs_sum = 0.0;
};

Ref reference(const Fp8Weight& w, const Act& a, int64_t r, int64_t c) {
  const int64_t grp = c / w.rank;
  const float* x = a.val.data() + r * a.cols + grp * w.gw;
  const float* wr = w.dec.data() + c * w.gw;
  double v[4] = {}, m[4] = {};  // four interleaved partial sums (gw % 64 == 0)
  for (int64_t k = 0; k < w.gw; k += 4) {
    for (int j = 0; j < 4; ++j) {
      const double t = static_cast<double>(x[k + j]) * static_cast<double>(wr[k + j]);
      v[j] += t;
      m[j] += std::fabs(t);
    }
  }
  return {(v[0] + v[1]) + (v[2] + v[3]), (m[0] + m[1]) + (m[2] + m[3])};
}

// The rows compared with the reference: all of up to 8, else the first two, every 23rd and the
// last (the double-precision reference costs 2^25 products per row at V4.1 size).
std::vector<int64_t> checked_rows(int64_t rows) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < rows; ++r)
    if (rows <= 8 || r < 2 || r % 23 == 0 || r == rows - 1) out.push_back(r);
  return out;
}

void check_tolerance(const std::vector<float>& got, const Fp8Weight& w, const Act& a,
                     const std::string& what) {
  const int64_t cols = w.rows();
  const bool bf16 = a.prec == ActPrecision::kBF16;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_FALSE(std::isnan(got[i])) << what << ": element " << i << " not written";
  double worst = 0.0, err2 = 0.0, ref2 = 0.0;
  for (const int64_t r : checked_rows(a.rows)) {
    for (int64_t c = 0; c < cols; ++c) {
      const Ref ref = reference(w, a, r, c);
      const double err = std::fabs(got[static_cast<size_t>(r * cols + c)] - ref.value);
      const double acc_bound = std::ldexp(ref.abs_sum, -14);
      const double allowed =
          acc_bound + (bf16 ? std::ldexp(std::fabs(ref.value) + acc_bound, -8) : 0.0) + 1e-30;
      worst = std::max(worst, err / allowed);
      err2 += err * err;
      ref2 += ref.value * ref.value;
    }
  }
  std::printf("%-48s max err/allowed %.2e  rel_l2 %.3e\n", what.c_str(), worst,
              std::sqrt(err2 / std::max(ref2, 1e-300)));
  EXPECT_LE(worst, 1.0) << what;
}

const char* name_of(ActPrecision p) {
  return p == ActPrecision::kF32 ? "fp32" : "bf16";
}

TEST(WoAGpu, RealShapeMatchesCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  uint64_t seed = 100;
  for (const int block : {32, 128}) {
    const Fp8Weight w = random_weight(kG, kR, kGw, block, ++seed, st);
    for (const int64_t rows : {1, 7, 64, 300}) {
      for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
        const Act a = random_act(rows, kG * kGw, prec, ++seed, st);
        const auto got = run_wo_a(w, a, st);
        check_tolerance(got, w, a,
                        "v4.1 block=" + std::to_string(block) + " rows=" + std::to_string(rows) +
                            " " + name_of(prec));
      }
    }
  }
}

// Weights and activations whose every partial sum is exact in fp32 (few significant bits, a
// narrow exponent window): the kernel must then return the exact dot product, bit for bit, on
// the fast scale path (scale in [10, 142], including subnormal e4m3 codes) and on the fallback
// path (scales 0-3 and 143-146), and a NaN scale must turn exactly its row block into NaN.
struct ExactCase {
  const char* name;
  WeightSpec spec;
  int xe;  // activations {-2 .. 2} * 2^xe
};

void check_exact(const std::vector<float>& got, const Fp8Weight& w, const Act& a,
                 const std::string& what, int64_t nan_row_lo = -1, int64_t nan_row_hi = -1) {
  const int64_t cols = w.rows();
  const bool bf16 = a.prec == ActPrecision::kBF16;
  int64_t bad = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = got[static_cast<size_t>(r * cols + c)];
      if (c >= nan_row_lo && c < nan_row_hi) {
        if (!std::isnan(v) && bad++ < 5) ADD_FAILURE() << what << " row " << r << " col " << c;
        continue;
      }
      const double ref = reference(w, a, r, c).value;
      ASSERT_EQ(static_cast<double>(static_cast<float>(ref)), ref) << what << ": inexact setup";
      const float want =
          bf16 ? bf16_to_float(bf16_from_float(static_cast<float>(ref))) : static_cast<float>(ref);
      if (float_bits(v) != float_bits(want) && bad++ < 5) {
        ADD_FAILURE() << what << " row " << r << " col " << c << ": got " << v << " want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(WoAGpu, ExactWhenPartialSumsAreRepresentable) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const ExactCase cases[] = {
      {"fast, small codes (subnormals)", {0, 3, 120, 123}, -2},
      {"fast, large codes", {12, 15, 100, 103}, -2},
      {"fast, range edges low", {0, 3, 10, 13}, 100},
      {"fast, range edges high", {0, 3, 139, 142}, -100},
      {"fallback, high scales", {0, 3, 143, 146}, -80},
      {"fallback, low scales", {0, 3, 0, 3}, 80},
  };
  uint64_t seed = 2000;
  for (const ExactCase& ec : cases) {
    for (const int block : {32, 128}) {
      const Fp8Weight w = random_weight(kG, kR, kGw, block, ++seed, st, ec.spec);
      for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
        const Act a = small_int_act(3, kG * kGw, ec.xe, prec, ++seed, st);
        check_exact(run_wo_a(w, a, st), w, a,
                    std::string(ec.name) + " block=" + std::to_string(block) + " " + name_of(prec));
      }
    }
  }
}

TEST(WoAGpu, NanScaleMakesItsRowBlockNan) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  for (const int block : {32, 128}) {
    Fp8Weight w = random_weight(kG, kR, kGw, block, 3000 + block, st, {0, 3, 120, 123});
    const int64_t rb = 2 * kR / block + 1;  // a row block of group 2
    w.scales[static_cast<size_t>(rb * w.scale_cols() + 3)] = 0xFF;
    w.decode();
    w.upload_to(st);
    const Act a = small_int_act(3, kG * kGw, -2, ActPrecision::kF32, 3100, st);
    check_exact(run_wo_a(w, a, st), w, a, "nan scale block=" + std::to_string(block), rb * block,
                (rb + 1) * block);
  }
}

// Shapes other than V4.1's: the v41-tiny fixture (2 groups, rank 64, 256 columns), partial row
// tiles and warps (rank 96, 544, 1152), K splits of 1, 2 and 4, partial 16-token chunks.
TEST(WoAGpu, SmallShapesMatchCpu) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const struct {
    int64_t groups, rank, gw;
    int block;
    int64_t rows;
  } shapes[] = {{2, 64, 256, 32, 13},   {2, 128, 256, 128, 5}, {3, 96, 192, 32, 17},
                {1, 544, 1024, 32, 33}, {2, 32, 64, 32, 3},    {4, 1152, 2048, 128, 9}};
  uint64_t seed = 4000;
  for (const auto& s : shapes) {
    const Fp8Weight w = random_weight(s.groups, s.rank, s.gw, s.block, ++seed, st);
    for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
      const Act a = random_act(s.rows, s.groups * s.gw, prec, ++seed, st);
      char what[128];
      std::snprintf(what, sizeof(what), "G=%ld R=%ld gw=%ld block=%d rows=%ld %s",
                    static_cast<long>(s.groups), static_cast<long>(s.rank), static_cast<long>(s.gw),
                    s.block, static_cast<long>(s.rows), name_of(prec));
      check_tolerance(run_wo_a(w, a, st), w, a, what);
    }
  }
}

// A row's outputs are bitwise the same alone, as a prefix of 7, within 64 rows and within 300.
TEST(WoAGpu, RowsAreBatchInvariant) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const Fp8Weight w = random_weight(kG, kR, kGw, 32, 5000, st);
  const int64_t cols = w.rows(), width = kG * kGw;
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    const std::vector<float> all = random_normal(static_cast<size_t>(300 * width), 5100);
    const auto prefix = [&](int64_t rows, int64_t first) {
      return std::vector<float>(all.begin() + first * width, all.begin() + (first + rows) * width);
    };
    const auto big = run_wo_a(w, make_act(prefix(300, 0), 300, width, prec, st), st);
    auto expect_rows = [&](const std::vector<float>& got, int64_t rows, int64_t first,
                           const char* what) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(float_bits(got[static_cast<size_t>(r * cols + c)]),
                    float_bits(big[static_cast<size_t>((first + r) * cols + c)]))
              << what << " " << name_of(prec) << " row " << first + r << " col " << c;
    };
    expect_rows(run_wo_a(w, make_act(prefix(64, 0), 64, width, prec, st), st), 64, 0, "64 rows");
    expect_rows(run_wo_a(w, make_act(prefix(7, 0), 7, width, prec, st), st), 7, 0, "7 rows");
    for (const int64_t r : {0, 13, 63, 200, 299})
      expect_rows(run_wo_a(w, make_act(prefix(1, r), 1, width, prec, st), st), 1, r, "alone");
  }
}

// The weights' first ring stages are requested before wo_a waits for the launch it follows, the
// activations after. Here that launch writes the activations into a poisoned buffer (a PDL
// conversion from the other storage; the values are exact in bf16): z is bitwise the plain
// launch's on ready activations, both storages, 1 / 16 / 200 rows, three repetitions.
TEST(WoAGpu, WeightsBeforeTheWaitActivationsAfterIt) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const Fp8Weight w = random_weight(kG, kR, kGw, 32, 6000, st);
  const int64_t width = kG * kGw;
  uint64_t seed = 6100;
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    for (const int64_t rows : {1, 16, 200}) {
      const auto n = static_cast<size_t>(rows * width);
      const std::vector<uint16_t> b = to_bf16(random_normal(n, ++seed));
      const std::vector<float> v = dense_test::from_bf16(b);
      const Act a = make_act(v, rows, width, prec, st);
      const auto want = run_wo_a(w, a, st);
      const bool bf16 = prec == ActPrecision::kBF16;
      // The other storage of the same values, converted by the launch before wo_a.
      const DeviceBuffer src = bf16 ? upload(v, st, "o fp32") : upload(b, st, "o bf16");
      for (int rep = 0; rep < 3; ++rep) {
        DeviceBuffer dst = bf16 ? poisoned<uint16_t>(n, st) : poisoned<float>(n, st);
        const auto got = run_wo_a(w, a, st, [&](WoAParams& p) {
          ConvertParams cp;
          cp.src = src.data();
          cp.src_precision = bf16 ? ActPrecision::kF32 : ActPrecision::kBF16;
          cp.dst = dst.data();
          cp.dst_precision = prec;
          cp.n = static_cast<int64_t>(n);
          convert_values(cp, st);
          p.o = dst.data();
        });
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(float_bits(got[i]), float_bits(want[i]))
              << name_of(prec) << " rows " << rows << " rep " << rep << " element " << i;
        }
      }
    }
  }
}

// wo_a's fused act_quant of z (z_codes / z_scales, what wo_b's FP8 GEMM reads): bitwise the
// standalone act_quant of the z it stores, and z itself bitwise the unfused launch's, at V4.1's
// shape, 1 / 7 / 16 / 200 rows (16- and 64-token CTAs), both storages.
TEST(WoAGpu, FusedActQuantIsTheStandaloneActQuant) {
  DI_REQUIRE_GPU();
  Stream stream;
  const cudaStream_t st = stream.get();
  const Fp8Weight w = random_weight(kG, kR, kGw, 32, 6000, st);
  const int64_t cols = w.rows();
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    for (const int64_t rows : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{200}}) {
      const Act a = random_act(rows, kG * kGw, prec, 6100 + static_cast<uint64_t>(rows), st);
      const auto n = static_cast<size_t>(rows * cols);
      const size_t esize = prec == ActPrecision::kBF16 ? 2 : 4;
      DeviceBuffer z(n * esize, "z"), zq = poisoned<uint8_t>(n, st),
                                      zs = poisoned<uint8_t>(n / 32, st), rq(n, "ref codes"),
                                      rs(n / 32, "ref scales");
      WoAParams p;
      p.o = a.d.data();
      p.precision = prec;
      p.weight = w.d_codes.as<uint8_t>();
      p.weight_scale = w.d_scales.as<uint8_t>();
      p.rows = rows;
      p.groups = kG;
      p.rank = kR;
      p.group_width = kGw;
      p.z = z.data();
      p.z_codes = zq.as<uint8_t>();
      p.z_scales = zs.as<uint8_t>();
      ASSERT_TRUE(wo_a_fuses_act_quant(p));
      wo_a(p, st);
      ActQuantParams q;
      q.x = z.data();
      q.codes = rq.as<uint8_t>();
      q.scales = rs.as<uint8_t>();
      q.rows = rows;
      q.dim = cols;
      q.block = 32;
      q.precision = prec;
      act_quant(q, st);
      const std::string what = std::string(name_of(prec)) + " rows " + std::to_string(rows);
      EXPECT_EQ(download<uint8_t>(zq, n, st), download<uint8_t>(rq, n, st)) << what;
      EXPECT_EQ(download<uint8_t>(zs, n / 32, st), download<uint8_t>(rs, n / 32, st)) << what;
      const std::vector<float> fused = prec == ActPrecision::kBF16
                                           ? dense_test::from_bf16(download<uint16_t>(z, n, st))
                                           : download<float>(z, n, st);
      const std::vector<float> plain = run_wo_a(w, a, st);
      ASSERT_EQ(fused.size(), plain.size());
      EXPECT_EQ(std::memcmp(fused.data(), plain.data(), fused.size() * 4), 0) << what;
    }
  }
}

// The launcher validates before any CUDA call, so this runs without a GPU (in CI): the pointers
// are host addresses that are never dereferenced.
TEST(WoALaunch, RejectsBadParamsBeforeAnyDeviceWork) {
  alignas(256) static std::byte fake[1024];
  const cudaStream_t st = nullptr;
  WoAParams ok;
  ok.o = fake;
  ok.weight = reinterpret_cast<const uint8_t*>(fake);
  ok.weight_scale = ok.weight;
  ok.z = fake;
  ok.rows = 4;
  ok.groups = kG;
  ok.rank = kR;
  ok.group_width = kGw;
  ok.block = 32;
  auto message = [&](auto edit) {
    WoAParams p = ok;
    edit(p);
    return error_of([&] { wo_a(p, st); });
  };
  std::string msg = message([](WoAParams& p) { p.block = 64; });
  EXPECT_NE(msg.find("wo_a: block 64"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.precision = static_cast<ActPrecision>(7); });
  EXPECT_NE(msg.find("wo_a: precision 7"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.rank = 1008; });  // not on a 32-row scale block
  EXPECT_NE(msg.find("rank 1008 must be a multiple of block 32"), std::string::npos) << msg;
  msg = message([](WoAParams& p) {
    p.rank = 1056;
    p.block = 128;
  });
  EXPECT_NE(msg.find("rank 1056 must be a multiple of block 128"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.group_width = 4000; });
  EXPECT_NE(msg.find("group_width 4000"), std::string::npos) << msg;
  msg = message([](WoAParams& p) {  // 192 is not a multiple of the 128 block
    p.group_width = 192;
    p.block = 128;
  });
  EXPECT_NE(msg.find("group_width 192"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.group_width = 1088; });  // one slice of 1088 columns
  EXPECT_NE(msg.find("slices of 1088"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.rows = int64_t{1} << 40; });
  EXPECT_NE(msg.find("more than a grid"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.z = nullptr; });
  EXPECT_NE(msg.find("wo_a: null"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.weight_scale = nullptr; });
  EXPECT_NE(msg.find("wo_a: null"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.o = fake + 8; });
  EXPECT_NE(msg.find("16-byte aligned"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.weight += 4; });
  EXPECT_NE(msg.find("16-byte aligned"), std::string::npos) << msg;
  msg = message([](WoAParams& p) { p.z = fake + 2; });
  EXPECT_NE(msg.find("4-byte elements"), std::string::npos) << msg;
  for (const auto edit : {+[](WoAParams& p) { p.rows = -1; }, +[](WoAParams& p) { p.groups = 0; },
                          +[](WoAParams& p) { p.rank = 0; }, +[](WoAParams& p) { p.rank = 8; },
                          +[](WoAParams& p) { p.group_width = 0; }}) {
    WoAParams p = ok;
    edit(p);
    EXPECT_THROW(wo_a(p, st), Error);
  }
  // The fused act_quant: codes and scales together, and only where a cluster rank stores whole
  // 32-column blocks (group_width 256: one slice, 256-row ranks).
  EXPECT_TRUE(wo_a_fuses_act_quant(ok));
  msg = message([](WoAParams& p) { p.z_codes = reinterpret_cast<uint8_t*>(fake); });
  EXPECT_NE(msg.find("z_codes and z_scales go together"), std::string::npos) << msg;
  msg = message([](WoAParams& p) {
    p.group_width = 256;
    p.z_codes = p.z_scales = reinterpret_cast<uint8_t*>(fake);
  });
  EXPECT_NE(msg.find("act_quant of z needs 32-row cluster ranks"), std::string::npos) << msg;
  // Zero rows: nothing to do, null pointers allowed, no device touched.
  WoAParams empty = ok;
  empty.rows = 0;
  empty.o = nullptr;
  empty.z = nullptr;
  EXPECT_NO_THROW(wo_a(empty, st));
}

TEST(WoALaunch, KSplitDependsOnGroupWidthOnly) {
  EXPECT_EQ(wo_a_k_split(4096), 8);  // V4.1 / V4: slices of 512
  EXPECT_EQ(wo_a_k_split(8192), 8);
  EXPECT_EQ(wo_a_k_split(6144), 8);  // 768
  EXPECT_EQ(wo_a_k_split(2048), 4);
  EXPECT_EQ(wo_a_k_split(1024), 2);
  EXPECT_EQ(wo_a_k_split(512), 1);
  EXPECT_EQ(wo_a_k_split(256), 1);  // v41-tiny
  EXPECT_EQ(wo_a_k_split(192), 1);
  EXPECT_THROW(wo_a_k_split(0), Error);
}

// The tiled wo_a codes (host packing, run in CI): every byte lands exactly once, and a 32 x 32
// tile is 1 KiB of consecutive memory whose 32-byte lines are its rows (what the kernel's cp.async
// addressing assumes); the tiles of a row block follow each other along K.
TEST(WoALaunch, TiledCodesHoldEveryByteOnceInTiles) {
  const struct { int64_t rows, gw; } shapes[] = {{8 * 1024, 4096}, {2 * 96, 192}, {32, 64}};
  std::mt19937_64 rng(91);
  for (const auto& s : shapes) {
    std::vector<uint8_t> src(static_cast<size_t>(s.rows * s.gw));
    for (auto& b : src)
      b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> out(src.size());
    pack_wo_a_weight(src.data(), s.rows, s.gw, out.data());
    std::vector<uint8_t> hit(src.size(), 0);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.gw; ++c) {
        const int64_t o = ((r / 32) * (s.gw / 32) + c / 32) * 1024 + (r % 32) * 32 + c % 32;
        ASSERT_EQ(o, wo_a_code_offset(r, c, s.gw));
        ASSERT_EQ(hit[static_cast<size_t>(o)]++, 0) << r << " " << c;
        ASSERT_EQ(out[static_cast<size_t>(o)], src[static_cast<size_t>(r * s.gw + c)]);
      }
  }
  std::vector<uint8_t> buf(48 * 64);
  EXPECT_THROW(pack_wo_a_weight(buf.data(), 48, 64, buf.data()), Error);  // rows % 32 != 0
}

}  // namespace
}  // namespace di
