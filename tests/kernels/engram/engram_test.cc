// Engram on the GPU (kernels/cuda/engram) against the CPU reference, at the V4.1-Flash sizes read
// from configs/v41-flash.json (hidden 5120, hc 4, 24 hash columns of 256 values):
//  - engram_decode_rows: table rows gathered on the host (gather_engram_rows) decode bit for bit
//    to cpu::decode_rows<float> (fp32) and to the shared codec e4m3_scaled_to_bf16 (bf16), NaN
//    codes and the whole scale-byte range included;
//  - engram_gate_mix: gates and new h against cpu::engram_gate_mix<double> on the same
//    (storage-rounded) inputs, within a tolerance derived per (row, stream) from an fp32 error
//    bound of the sums (see gate_mix_bounds); image-span rows keep h bitwise; the nullable mask
//    and gates; bitwise batch invariance (rows = 1, 7, 64, 300 against each other);
//  - bad Params throw di::Error naming the op.
// Outputs are poisoned (0xFF bytes: NaN) before every launch.

#include "kernels/cpu/engram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "common/error.h"
#include "common/fp8.h"
#include "config/model_config.h"
#include "engram/row_gather.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/engram/engram.cuh"
#include "tests_support/error_of.h"

namespace di {
namespace {

using dense_test::download;
using dense_test::float_bits;
using dense_test::poisoned;
using dense_test::upload;

struct Dims {
  int64_t dim = 0;       // hidden_size
  int64_t hc = 0;        // hc_mult
  int64_t head_dim = 0;  // values per Engram table row
  int64_t columns = 0;   // hashed table rows per token (engram_hash_columns)
  float eps = 0;         // rms_norm_eps
};

const Dims& v41() {
  static const Dims d = [] {
    const ModelConfig c =
        load_model_config_file(std::string(DI_SOURCE_DIR) + "/configs/v41-flash.json");
    return Dims{c.hidden_size, c.hc_mult, c.engram_head_dim, c.engram_hash_columns(),
                static_cast<float>(c.rms_norm_eps)};
  }();
  return d;
}

const char* name_of(ActPrecision p) {
  return p == ActPrecision::kF32 ? "fp32" : "bf16";
}

using test::error_of;

// ---- engram_decode_rows ----

// A [rows, cols] FP8 table with every e4m3 code (NaN included) and scale bytes mostly in the
// range of trained tables, [110, 140], one block in 8 anywhere in [0, 255] (fp32-subnormal
// products at the bottom, overflow to inf and the NaN byte at the top).
struct Table {
  std::vector<uint8_t> codes, scales;
  cpu::WeightRef ref;
  Table(int64_t rows, int64_t cols, uint64_t seed) {
    std::mt19937_64 rng(seed);
    codes.resize(static_cast<size_t>(rows * cols));
    scales.resize(static_cast<size_t>(rows * cols / 32));
    for (auto& c : codes)
      c = static_cast<uint8_t>(rng());
    for (auto& s : scales)
      s = static_cast<uint8_t>(rng() % 8 == 0 ? rng() % 256 : 110 + rng() % 31);
    const ConstTensorView w{reinterpret_cast<const std::byte*>(codes.data()), DType::kF8E4M3,
                            Shape{rows, cols}};
    const ConstTensorView s{reinterpret_cast<const std::byte*>(scales.data()), DType::kF8E8M0,
                            Shape{rows, cols / 32}};
    ref = cpu::fp8_block_weight(w, s, 1, 32, "engram.table");
  }
};

class EngramDecodeGpu : public ::testing::TestWithParam<ActPrecision> {};

TEST_P(EngramDecodeGpu, StagedRowsDecodeBitExact) {
  DI_REQUIRE_GPU();
  const ActPrecision prec = GetParam();
  const Dims& d = v41();
  const int64_t table_rows = 4096;
  const Table table(table_rows, d.head_dim, 11);
  Stream stream;
  const cudaStream_t st = stream.get();
  std::mt19937_64 rng(12);
  for (const int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{300}}) {
    SCOPED_TRACE(::testing::Message() << name_of(prec) << " tokens " << tokens);
    const int64_t n = tokens * d.columns;
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto& id : ids)
      id = static_cast<int64_t>(rng() % table_rows);
    std::vector<uint8_t> staging(engram_staging_bytes(table.ref, n));
    gather_engram_rows(table.ref, ids, staging);
    const DeviceBuffer d_staging = upload(staging, st);
    const size_t values = static_cast<size_t>(n * d.head_dim);
    const size_t esize = prec == ActPrecision::kF32 ? 4 : 2;
    DeviceBuffer d_out = poisoned<uint8_t>(values * esize, st);
    EngramDecodeParams p;
    p.staging = d_staging.as<uint8_t>();
    p.out = d_out.data();
    p.rows = n;
    p.cols = d.head_dim;
    p.precision = prec;
    engram_decode_rows(p, st);
    const auto got = download<uint8_t>(d_out, values * esize, st);
    std::vector<float> want(static_cast<size_t>(d.head_dim));
    int64_t nan = 0, subnormal = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[static_cast<size_t>(i)];
      cpu::decode_rows<float>(table.ref, id, id + 1, want.data());
      for (int64_t c = 0; c < d.head_dim; ++c) {
        const size_t k = static_cast<size_t>(i * d.head_dim + c);
        const float w = want[static_cast<size_t>(c)];
        nan += std::isnan(w) ? 1 : 0;
        subnormal += std::fpclassify(w) == FP_SUBNORMAL ? 1 : 0;
        if (prec == ActPrecision::kF32) {
          float g;
          std::memcpy(&g, got.data() + 4 * k, 4);
          if (std::isnan(w)) {
            ASSERT_TRUE(std::isnan(g)) << "row " << i << " col " << c << ": " << g;
          } else {
            ASSERT_EQ(float_bits(g), float_bits(w))
                << "row " << i << " col " << c << ": " << g << " vs " << w;
          }
        } else {
          uint16_t g;
          std::memcpy(&g, got.data() + 2 * k, 2);
          // Bitwise the shared codec step, NaN bits included; and the CPU's fp32 value rounded.
          const auto code = table.codes[static_cast<size_t>(id * d.head_dim + c)];
          const auto byte = table.scales[static_cast<size_t>((id * d.head_dim + c) / 32)];
          ASSERT_EQ(g, e4m3_scaled_to_bf16(code, e8m0_to_float(byte)))
              << "row " << i << " col " << c;
          if (!std::isnan(w)) {
            ASSERT_EQ(g, bf16_from_float(w)) << "row " << i << " col " << c;
            // The values of trained tables are exact in bf16.
            if (byte >= 110 && byte <= 140) {
              ASSERT_EQ(bf16_to_float(g), w);
            }
          }
        }
      }
    }
    std::printf("decode %s: %lld values bitwise (%lld NaN, %lld fp32-subnormal)\n", name_of(prec),
                static_cast<long long>(values), static_cast<long long>(nan),
                static_cast<long long>(subnormal));
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, EngramDecodeGpu,
                         ::testing::Values(ActPrecision::kF32, ActPrecision::kBF16),
                         [](const auto& tp) { return std::string(name_of(tp.param)); });

// ---- engram_gate_mix ----

// Inputs of one gate-mix call, as fp32 values exactly representable in the storage type.
struct MixInputs {
  std::vector<float> h, kv, wqk;
  std::vector<uint8_t> mask;
};

float storage_round(float v, ActPrecision p) {
  return p == ActPrecision::kF32 ? v : bf16_to_float(bf16_from_float(v));
}

// h, keys, value ~ N(0, 1) and wqk ~ N(0, 1): s ~ N(0, 1), so the gates spread over (0.2, 0.8).
// One row in 5 is an image-span row. Row r's inputs depend on r only (seeded per row), so a
// prefix of a larger batch holds the same rows.
MixInputs mix_inputs(int64_t rows, ActPrecision prec, uint64_t seed) {
  const Dims& d = v41();
  MixInputs in;
  in.h.resize(static_cast<size_t>(rows * d.hc * d.dim));
  in.kv.resize(static_cast<size_t>(rows * (d.hc + 1) * d.dim));
  in.mask.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(r));
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int64_t k = 0; k < d.hc * d.dim; ++k)
      in.h[static_cast<size_t>(r * d.hc * d.dim + k)] = storage_round(g(rng), prec);
    for (int64_t k = 0; k < (d.hc + 1) * d.dim; ++k)
      in.kv[static_cast<size_t>(r * (d.hc + 1) * d.dim + k)] = storage_round(g(rng), prec);
    in.mask[static_cast<size_t>(r)] = r % 5 == 2 ? 1 : 0;
  }
  in.wqk = dense_test::random_normal(static_cast<size_t>(d.hc * d.dim), seed + 1);
  return in;
}

std::vector<uint8_t> to_storage(const std::vector<float>& v, ActPrecision p) {
  if (p == ActPrecision::kF32) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t x = bf16_from_float(v[i]);
    std::memcpy(b.data() + 2 * i, &x, 2);
  }
  return b;
}

std::vector<float> from_storage(const std::vector<uint8_t>& b, ActPrecision p) {
  if (p == ActPrecision::kF32) {
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  }
  std::vector<float> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t x;
    std::memcpy(&x, b.data() + 2 * i, 2);
    v[i] = bf16_to_float(x);
  }
  return v;
}

struct MixOut {
  std::vector<uint8_t> h;  // [rows, hc, dim] storage bytes
  std::vector<float> gates;
};

// Runs engram_gate_mix on the first `rows` rows of `in` (gates poisoned before the launch).
MixOut run_gate_mix(const MixInputs& in, int64_t rows, ActPrecision prec, bool with_mask,
                    bool with_gates, cudaStream_t st) {
  const Dims& d = v41();
  const size_t es = prec == ActPrecision::kF32 ? 4 : 2;
  const size_t h_bytes = static_cast<size_t>(rows * d.hc * d.dim) * es;
  const size_t kv_bytes = static_cast<size_t>(rows * (d.hc + 1) * d.dim) * es;
  auto h_all = to_storage(in.h, prec);
  auto kv_all = to_storage(in.kv, prec);
  h_all.resize(h_bytes);
  kv_all.resize(kv_bytes);
  DeviceBuffer d_h = upload(h_all, st), d_kv = upload(kv_all, st), d_wqk = upload(in.wqk, st);
  DeviceBuffer d_mask = upload(in.mask, st);
  DeviceBuffer d_gates = poisoned<float>(static_cast<size_t>(rows * d.hc), st);
  EngramGateMixParams p;
  p.h = d_h.data();
  p.kv = d_kv.data();
  p.wqk = d_wqk.as<float>();
  p.image_mask = with_mask ? d_mask.as<uint8_t>() : nullptr;
  p.gates = with_gates ? d_gates.as<float>() : nullptr;
  p.rows = rows;
  p.hc = d.hc;
  p.dim = d.dim;
  p.eps = d.eps;
  p.precision = prec;
  engram_gate_mix(p, st);
  MixOut o;
  o.h = download<uint8_t>(d_h, h_bytes, st);
  o.gates = download<float>(d_gates, static_cast<size_t>(rows * d.hc), st);
  return o;
}

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

// The gate as a function of the normalised score s (monotone non-decreasing; a jump at 0).
double gate_of(double s) {
  const double mag = std::sqrt(std::max(std::fabs(s), 1e-6));
  return 1.0 / (1.0 + std::exp(-std::copysign(mag, s)));
}

// Per (row, stream): the exact (double) normalised score s and a bound on the GPU's fp32 error of
// it. The GPU sums n = dim terms as per-thread chains of dim / 1024 float4 chunks (4 terms each),
// a 5-level butterfly and 7 warp additions: depth m = dim / 256 + 12 additions, so each sum is
// off by at most ~m u times the sum of |terms| (Higham's recursive-summation bound, applied to the
// tree); the products add 2 u, rstd's sqrt / division / product ~8 u more, s's two products 2 u.
// With a factor 2 of margin: |ds| <= 2 (m + 2) u * A / (rms_h rms_k sqrt(dim)) + 2 (2 m + 12) u |s|
// where A = sum |h wqk key| (hss and kss have positive terms: their relative error enters |s|).
struct ScoreBound {
  double s = 0, err = 0;
};

ScoreBound score_bound(const float* h, const float* key, const float* wqk, int64_t dim,
                       double eps) {
  double hss = 0, kss = 0, dot = 0, abs_dot = 0;
  for (int64_t k = 0; k < dim; ++k) {
    const double x = h[k], q = wqk[k], y = key[k];
    hss += x * x;
    kss += y * y;
    dot += x * q * y;
    abs_dot += std::fabs(x * q * y);
  }
  const double norm = (1.0 / std::sqrt(hss / static_cast<double>(dim) + eps)) *
                      (1.0 / std::sqrt(kss / static_cast<double>(dim) + eps)) /
                      std::sqrt(static_cast<double>(dim));
  const double m = static_cast<double>(dim) / 256.0 + 12.0;
  ScoreBound b;
  b.s = dot * norm;
  b.err = 2.0 * (m + 2.0) * kU * abs_dot * norm + 2.0 * (2.0 * m + 12.0) * kU * std::fabs(b.s);
  return b;
}

// Checks one gate-mix run of `rows` rows against cpu::engram_gate_mix<double>.
void check_gate_mix(const MixInputs& in, const MixOut& got, int64_t rows, ActPrecision prec,
                    bool with_mask) {
  const Dims& d = v41();
  const size_t nh = static_cast<size_t>(rows * d.hc * d.dim);
  std::vector<double> h(in.h.begin(), in.h.begin() + static_cast<std::ptrdiff_t>(nh));
  const std::vector<double> kv(
      in.kv.begin(), in.kv.begin() + static_cast<std::ptrdiff_t>(rows * (d.hc + 1) * d.dim));
  const std::vector<double> wqk(in.wqk.begin(), in.wqk.end());
  std::vector<double> gates(static_cast<size_t>(rows * d.hc));
  cpu::engram_gate_mix<double>(h.data(), kv.data(), wqk.data(), rows, d.hc, d.dim, d.eps,
                               with_mask ? in.mask.data() : nullptr, gates.data());
  const std::vector<float> gh = from_storage(got.h, prec);
  double worst_gate = 0, worst_h = 0;  // largest error / tolerance ratios
  for (int64_t r = 0; r < rows; ++r) {
    const bool image = with_mask && in.mask[static_cast<size_t>(r)] != 0;
    const float* value = in.kv.data() + (r * (d.hc + 1) + d.hc) * d.dim;
    for (int64_t c = 0; c < d.hc; ++c) {
      const size_t gi = static_cast<size_t>(r * d.hc + c);
      const float* hin = in.h.data() + (r * d.hc + c) * d.dim;
      const ScoreBound sb = score_bound(hin, in.kv.data() + (r * (d.hc + 1) + c) * d.dim,
                                        in.wqk.data() + c * d.dim, d.dim, d.eps);
      // The gate is monotone in s: its error is at most the spread over s +- err, plus expf's
      // and the sigmoid's own fp32 rounding (a few ulps of a value < 1).
      const double gate_tol =
          image ? 0.0 : gate_of(sb.s + sb.err) - gate_of(sb.s - sb.err) + 16.0 * kU;
      const double gref = gates[gi];
      const double gg = got.gates[gi];
      if (image) {
        ASSERT_EQ(float_bits(got.gates[gi]), 0u) << "image row " << r << " stream " << c;
      } else {
        ASSERT_LE(std::fabs(gg - gref), gate_tol)
            << "gate row " << r << " stream " << c << ": " << gg << " vs " << gref;
        worst_gate = std::max(worst_gate, std::fabs(gg - gref) / gate_tol);
      }
      for (int64_t k = 0; k < d.dim; ++k) {
        const size_t hi = static_cast<size_t>((r * d.hc + c) * d.dim + k);
        const float g = gh[hi];
        if (image) {  // h + 0 * value: h itself, bit for bit
          ASSERT_EQ(float_bits(g), float_bits(hin[k])) << "image row " << r << " d " << k;
          continue;
        }
        const double ref = h[hi];
        // fp32 h + gate * v (one rounding, or two without FMA) with gate off by gate_tol.
        const double v = std::fabs(static_cast<double>(value[k]));
        const double delta =
            (gate_tol + kU) * v + 2.0 * kU * (std::fabs(hin[k]) + std::fabs(gref) * v);
        // bf16 storage: one more RNE rounding, half an ulp <= 2^-8 of the magnitude.
        const double tol =
            prec == ActPrecision::kF32 ? delta : delta + std::ldexp(std::fabs(ref) + delta, -8);
        ASSERT_LE(std::fabs(g - ref), tol)
            << "h row " << r << " stream " << c << " d " << k << ": " << g << " vs " << ref;
        worst_h = std::max(worst_h, std::fabs(g - ref) / tol);
      }
    }
  }
  std::printf("gate_mix %s rows %lld: worst error / tolerance: gates %.3f, h %.3f\n", name_of(prec),
              static_cast<long long>(rows), worst_gate, worst_h);
}

class EngramGateMixGpu : public ::testing::TestWithParam<ActPrecision> {};

TEST_P(EngramGateMixGpu, MatchesCpuReference) {
  DI_REQUIRE_GPU();
  const ActPrecision prec = GetParam();
  Stream stream;
  const MixInputs in = mix_inputs(300, prec, 21);
  for (const int64_t rows : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{300}}) {
    SCOPED_TRACE(::testing::Message() << name_of(prec) << " rows " << rows);
    const MixOut got = run_gate_mix(in, rows, prec, true, true, stream.get());
    check_gate_mix(in, got, rows, prec, true);
  }
}

TEST_P(EngramGateMixGpu, NullMaskAndGates) {
  DI_REQUIRE_GPU();
  const ActPrecision prec = GetParam();
  Stream stream;
  const int64_t rows = 7;
  const MixInputs in = mix_inputs(rows, prec, 31);
  // No mask: every row is gated (row 2 would be an image row with the mask).
  const MixOut no_mask = run_gate_mix(in, rows, prec, false, true, stream.get());
  check_gate_mix(in, no_mask, rows, prec, false);
  // No gates output: h is the same, bit for bit, and the gates buffer stays poisoned.
  const MixOut no_gates = run_gate_mix(in, rows, prec, false, false, stream.get());
  EXPECT_EQ(no_gates.h, no_mask.h);
  for (const float g : no_gates.gates)
    ASSERT_TRUE(std::isnan(g));
}

TEST_P(EngramGateMixGpu, RowsAreBatchInvariant) {
  DI_REQUIRE_GPU();
  const ActPrecision prec = GetParam();
  const Dims& d = v41();
  Stream stream;
  const size_t es = prec == ActPrecision::kF32 ? 4 : 2;
  const size_t h_row = static_cast<size_t>(d.hc * d.dim) * es;
  const MixInputs big = mix_inputs(300, prec, 41);
  const MixOut ref = run_gate_mix(big, 64, prec, true, true, stream.get());
  // The same call again: deterministic.
  const MixOut again = run_gate_mix(big, 64, prec, true, true, stream.get());
  ASSERT_EQ(again.h, ref.h);
  ASSERT_EQ(std::memcmp(again.gates.data(), ref.gates.data(), ref.gates.size() * 4), 0);
  // Prefixes and extensions of the batch (rows 7 and 300 start with the same rows).
  for (const int64_t rows : {int64_t{7}, int64_t{300}}) {
    const MixOut o = run_gate_mix(big, rows, prec, true, true, stream.get());
    const int64_t common = std::min<int64_t>(rows, 64);
    ASSERT_EQ(std::memcmp(o.h.data(), ref.h.data(), static_cast<size_t>(common) * h_row), 0)
        << "rows " << rows;
    ASSERT_EQ(std::memcmp(o.gates.data(), ref.gates.data(), static_cast<size_t>(common * d.hc) * 4),
              0)
        << "rows " << rows;
  }
  // Single rows, alone (rows = 1, at offset 0 of their own buffers).
  for (const int64_t r : {int64_t{0}, int64_t{2}, int64_t{13}, int64_t{63}}) {
    MixInputs one;
    one.h.assign(big.h.begin() + r * d.hc * d.dim, big.h.begin() + (r + 1) * d.hc * d.dim);
    one.kv.assign(big.kv.begin() + r * (d.hc + 1) * d.dim,
                  big.kv.begin() + (r + 1) * (d.hc + 1) * d.dim);
    one.wqk = big.wqk;
    one.mask = {big.mask[static_cast<size_t>(r)]};
    const MixOut o = run_gate_mix(one, 1, prec, true, true, stream.get());
    ASSERT_EQ(std::memcmp(o.h.data(), ref.h.data() + static_cast<size_t>(r) * h_row, h_row), 0)
        << "row " << r;
    ASSERT_EQ(
        std::memcmp(o.gates.data(), ref.gates.data() + r * d.hc, static_cast<size_t>(d.hc) * 4), 0)
        << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, EngramGateMixGpu,
                         ::testing::Values(ActPrecision::kF32, ActPrecision::kBF16),
                         [](const auto& tp) { return std::string(name_of(tp.param)); });

// ---- Bad Params ----

// Shape errors are found before any pointer is used: no device needed.
TEST(EngramGpuErrors, BadShapesNameTheOp) {
  EngramDecodeParams dp;
  dp.rows = 24;
  dp.cols = 48;  // not a multiple of 32
  std::string msg = error_of([&] { engram_decode_rows(dp, nullptr); });
  EXPECT_NE(msg.find("engram_decode_rows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("48"), std::string::npos) << msg;
  dp.cols = 256;
  dp.rows = -1;
  EXPECT_THROW(engram_decode_rows(dp, nullptr), Error);
  dp.rows = 24;  // null staging / out
  msg = error_of([&] { engram_decode_rows(dp, nullptr); });
  EXPECT_NE(msg.find("engram_decode_rows: null"), std::string::npos) << msg;
  dp.precision = static_cast<ActPrecision>(7);
  EXPECT_THROW(engram_decode_rows(dp, nullptr), Error);

  EngramGateMixParams mp;
  mp.rows = 4;
  mp.hc = 4;
  mp.dim = 5122;  // not a multiple of 4
  msg = error_of([&] { engram_gate_mix(mp, nullptr); });
  EXPECT_NE(msg.find("engram_gate_mix"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5122"), std::string::npos) << msg;
  mp.dim = 5120;
  mp.hc = 0;
  EXPECT_THROW(engram_gate_mix(mp, nullptr), Error);
  mp.hc = 4;
  mp.eps = -1.0f;
  EXPECT_THROW(engram_gate_mix(mp, nullptr), Error);
  mp.eps = 1e-20f;
  mp.rows = int64_t{1} << 30;  // rows * hc exceeds the grid
  msg = error_of([&] { engram_gate_mix(mp, nullptr); });
  EXPECT_NE(msg.find("exceed the grid"), std::string::npos) << msg;
  mp.rows = 4;  // null h / kv / wqk
  msg = error_of([&] { engram_gate_mix(mp, nullptr); });
  EXPECT_NE(msg.find("engram_gate_mix: null"), std::string::npos) << msg;
  mp.precision = static_cast<ActPrecision>(7);
  EXPECT_THROW(engram_gate_mix(mp, nullptr), Error);
  // Zero rows: nothing to do, null pointers allowed.
  mp.precision = ActPrecision::kF32;
  mp.rows = 0;
  EXPECT_NO_THROW(engram_gate_mix(mp, nullptr));
  dp.precision = ActPrecision::kF32;
  dp.rows = 0;
  EXPECT_NO_THROW(engram_decode_rows(dp, nullptr));
}

// Misaligned pointers (real device buffers, offset by 4 bytes).
TEST(EngramGpuErrors, MisalignedPointersAreRejected) {
  DI_REQUIRE_GPU();
  Stream stream;
  const Dims& d = v41();
  DeviceBuffer staging(static_cast<size_t>(d.columns * (d.head_dim + d.head_dim / 32)) + 64, "s");
  DeviceBuffer out(static_cast<size_t>(d.columns * d.head_dim) * 4 + 64, "out");
  EngramDecodeParams dp;
  dp.staging = staging.as<uint8_t>() + 4;
  dp.out = out.data();
  dp.rows = d.columns;
  dp.cols = d.head_dim;
  std::string msg = error_of([&] { engram_decode_rows(dp, stream.get()); });
  EXPECT_NE(msg.find("16-byte aligned"), std::string::npos) << msg;

  const size_t rows = 2;
  DeviceBuffer h(rows * static_cast<size_t>(d.hc * d.dim) * 4 + 64, "h");
  DeviceBuffer kv(rows * static_cast<size_t>((d.hc + 1) * d.dim) * 4 + 64, "kv");
  DeviceBuffer wqk(static_cast<size_t>(d.hc * d.dim) * 4 + 64, "wqk");
  EngramGateMixParams mp;
  mp.h = h.as<uint8_t>() + 4;
  mp.kv = kv.data();
  mp.wqk = wqk.as<float>();
  mp.rows = static_cast<int64_t>(rows);
  mp.hc = d.hc;
  mp.dim = d.dim;
  msg = error_of([&] { engram_gate_mix(mp, stream.get()); });
  EXPECT_NE(msg.find("16-byte aligned"), std::string::npos) << msg;
  stream.synchronize();
}

}  // namespace
}  // namespace di
