// RoPE / inverse RoPE and the embedding gather on the GPU against the CPU references
// (cpu::RopeTable<float>, cpu::decode_rows) at V4.1 dimensions, with poisoned outputs.
//
// Tolerances: RoPE fp32 |gpu - cpu| <= 2.5e-7 * (|a| + |b|) per rotated pair element (cos/sin may
// differ by one fp32 ulp: the GPU rounds a double cos/sin, glibc's cosf/sinf are accurate to
// ~0.56 ulp and misround ~1% of the angles; measured on the H200: 98.9% of fp32 elements bitwise
// equal, checked >= 98%); the non-rope part bitwise untouched; bf16 storage within one bf16 ulp
// (>= 99.9% bitwise). Embedding bitwise.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "core/tensor_view.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/ops/embedding.cuh"
#include "kernels/cuda/ops/rope.cuh"
#include "kernels/dense_ops/dense_ops_test_util.h"

namespace di {
namespace {

using namespace dense_test;  // NOLINT

cpu::RopeParams plain_rope() {
  cpu::RopeParams p;
  p.rope_dim = 64;
  p.base = 10000.0;
  return p;
}

cpu::RopeParams yarn_rope() {
  cpu::RopeParams p;
  p.rope_dim = 64;
  p.base = 160000.0;
  p.original_seq_len = 65536;
  p.factor = 16;
  p.beta_fast = 32;
  p.beta_slow = 1;
  return p;
}

struct RopeCase {
  const char* name;
  int64_t heads;
  int64_t head_dim;
  bool yarn;
  bool inverse;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {
 protected:
  void SetUp() override { DI_REQUIRE_GPU(); }
};

TEST_P(RopeTest, MatchesCpuTable) {
  const RopeCase c = GetParam();
  const cpu::RopeParams rp = c.yarn ? yarn_rope() : plain_rope();
  const cpu::RopeTable<float> table(rp);
  const int64_t rows = 300;
  const int64_t width = c.heads * c.head_dim;
  Stream stream;
  std::mt19937_64 rng(1234 + static_cast<uint64_t>(c.heads));
  std::vector<int64_t> pos(static_cast<size_t>(rows));
  for (size_t r = 0; r < pos.size(); ++r)
    pos[r] = r < 4 ? static_cast<int64_t>(r) : static_cast<int64_t>(rng() % (1u << 20));
  pos[4] = (1 << 24) - 1;  // the largest exact fp32 position
  const DeviceBuffer posd = upload(pos, stream.get());
  const DeviceBuffer fd = upload(table.freqs(), stream.get());
  for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
    SCOPED_TRACE(prec == ActPrecision::kF32 ? "fp32" : "bf16");
    const bool bf = prec == ActPrecision::kBF16;
    auto x = random_normal(static_cast<size_t>(rows * width), 77 + width + bf, 1.5f);
    if (bf) x = from_bf16(to_bf16(x));
    DeviceBuffer xd = bf ? upload(to_bf16(x), stream.get()) : upload(x, stream.get());
    RopeApplyParams p;
    p.x = xd.data();
    p.positions = posd.as<int64_t>();
    p.freqs = fd.as<float>();
    p.rows = rows;
    p.heads = c.heads;
    p.head_dim = c.head_dim;
    p.rope_dim = rp.rope_dim;
    p.inverse = c.inverse;
    p.precision = prec;
    apply_rope(p, stream.get());
    std::vector<float> got;
    if (bf) {
      got = from_bf16(download<uint16_t>(xd, x.size(), stream.get()));
    } else {
      got = download<float>(xd, x.size(), stream.get());
    }
    std::vector<float> ref = x;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < c.heads; ++h) {
        table.apply(ref.data() + r * width + h * c.head_dim + (c.head_dim - rp.rope_dim),
                    pos[static_cast<size_t>(r)], c.inverse);
      }
    }
    int64_t exact = 0;
    int64_t rotated = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t base = r * width + h * c.head_dim;
        for (int64_t i = 0; i < c.head_dim; ++i) {
          const auto k = static_cast<size_t>(base + i);
          const int64_t j = i - (c.head_dim - rp.rope_dim);
          if (j < 0) {
            ASSERT_EQ(float_bits(got[k]), float_bits(x[k])) << "non-rope element changed at " << k;
            continue;
          }
          const auto k0 = static_cast<size_t>(base + (c.head_dim - rp.rope_dim) + (j & ~1));
          const double scale = std::fabs(x[k0]) + std::fabs(x[k0 + 1]);
          ++rotated;
          if (bf) {
            const int d = std::abs(static_cast<int>(bf16_from_float(got[k])) -
                                   static_cast<int>(bf16_from_float(ref[k])));
            ASSERT_LE(d, 1) << "bf16 rope differs by more than one ulp at " << k;
            exact += d == 0;
          } else {
            ASSERT_LE(std::fabs(static_cast<double>(got[k]) - ref[k]), 2.5e-7 * scale + 1e-37)
                << "row " << r << " head " << h << " rope element " << j << " pos "
                << pos[static_cast<size_t>(r)];
            exact += float_bits(got[k]) == float_bits(ref[k]);
          }
        }
      }
    }
    EXPECT_GE(static_cast<double>(exact) / static_cast<double>(rotated), bf ? 0.999 : 0.98);
    RecordProperty(bf ? "bf16_exact_fraction" : "fp32_exact_fraction",
                   std::to_string(static_cast<double>(exact) / static_cast<double>(rotated)));
  }
}

INSTANTIATE_TEST_SUITE_P(V41Heads, RopeTest,
                         ::testing::Values(RopeCase{"q_plain", 64, 512, false, false},
                                           RopeCase{"q_yarn", 64, 512, true, false},
                                           RopeCase{"kv_yarn", 1, 512, true, false},
                                           RopeCase{"o_inverse_plain", 64, 512, false, true},
                                           RopeCase{"o_inverse_yarn", 64, 512, true, true},
                                           RopeCase{"indexer_q", 64, 128, true, false}),
                         [](const auto& tp) { return std::string(tp.param.name); });

TEST(EmbeddingTest, GatherIsExact) {
  DI_REQUIRE_GPU();
  const int64_t vocab = 129280;
  const int64_t dim = 5120;
  const auto& table = big_table();
  Stream stream;
  const DeviceBuffer td = upload(table, stream.get(), "embedding table");
  const cpu::WeightRef w =
      cpu::dense_weight(ConstTensorView{reinterpret_cast<const std::byte*>(table.data()),
                                        DType::kBF16, Shape{vocab, dim}},
                        "embed.weight");
  std::mt19937_64 rng(99);
  const int64_t rows = 777;
  std::vector<int64_t> ids(static_cast<size_t>(rows));
  for (auto& id : ids)
    id = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  ids[0] = 0;
  ids[1] = vocab - 1;
  const DeviceBuffer idd = upload(ids, stream.get());
  for (const int64_t copies : {int64_t{1}, int64_t{4}}) {
    for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
      SCOPED_TRACE(testing::Message()
                   << "copies " << copies << (prec == ActPrecision::kF32 ? " fp32" : " bf16"));
      const size_t n = static_cast<size_t>(rows * copies * dim);
      const size_t esize = prec == ActPrecision::kF32 ? 4 : 2;
      DeviceBuffer od(n * esize, "embedding out");
      od.fill_async(0xFF, stream.get());
      EmbeddingParams p;
      p.table = td.as<uint16_t>();
      p.ids = idd.as<int64_t>();
      p.out = od.data();
      p.rows = rows;
      p.vocab = vocab;
      p.dim = dim;
      p.copies = copies;
      p.precision = prec;
      embedding_gather(p, stream.get());
      std::vector<float> row(static_cast<size_t>(dim));
      if (prec == ActPrecision::kF32) {
        const auto got = download<float>(od, n, stream.get());
        for (int64_t r = 0; r < rows; ++r) {
          cpu::decode_rows(w, ids[static_cast<size_t>(r)], ids[static_cast<size_t>(r)] + 1,
                           row.data());
          for (int64_t c = 0; c < copies; ++c) {
            ASSERT_EQ(std::memcmp(got.data() + (r * copies + c) * dim, row.data(), dim * 4), 0)
                << "row " << r << " copy " << c;
          }
        }
      } else {
        const auto got = download<uint16_t>(od, n, stream.get());
        for (int64_t r = 0; r < rows; ++r) {
          const uint16_t* src = table.data() + ids[static_cast<size_t>(r)] * dim;
          for (int64_t c = 0; c < copies; ++c) {
            ASSERT_EQ(std::memcmp(got.data() + (r * copies + c) * dim, src, dim * 2), 0)
                << "row " << r << " copy " << c;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace di
