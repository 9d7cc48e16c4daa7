#include "common/block_dequant.h"

#include <algorithm>
#include <array>

#include "common/bf16.h"
#include "common/check.h"
#include "common/fp4.h"
#include "common/fp8.h"

namespace di {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Validated geometry of one call: the tensors' bytes, K, the scale row length and the rows to
// convert.
struct Geometry {
  const uint8_t* weight = nullptr;  // [N, K] e4m3 or [N, K/2] e2m1 pairs
  const uint8_t* scale = nullptr;   // [scale_rows, scale_cols] e8m0
  int64_t n = 0;
  int64_t k = 0;
  int64_t scale_cols = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
};

void check_rows_and_out(const char* fn, Geometry& g, RowRange rows, size_t out_size) {
  g.row_begin = rows.begin;
  g.row_end = rows.end == -1 ? g.n : rows.end;
  DI_CHECK(g.row_begin >= 0 && g.row_begin <= g.row_end && g.row_end <= g.n,
           "{}: row range [{}, {}) is not inside the weight's {} rows", fn, rows.begin, rows.end,
           g.n);
  const int64_t expected = (g.row_end - g.row_begin) * g.k;
  DI_CHECK(static_cast<int64_t>(out_size) == expected,
           "{}: out has {} elements, expected {} ({} rows x K = {})", fn, out_size, expected,
           g.row_end - g.row_begin, g.k);
}

void check_scale(const char* fn, ConstTensorView scale, const Shape& expected,
                 const Shape& weight_shape, const std::string& layout) {
  DI_CHECK(scale.dtype == DType::kF8E8M0, "{}: scale must be F8_E8M0, got {}", fn,
           dtype_name(scale.dtype));
  DI_CHECK(scale.shape == expected,
           "{}: scale for weight {} with {} blocks must have shape {}, got {}", fn, weight_shape,
           layout, expected, scale.shape);
  DI_CHECK(scale.data != nullptr || expected.numel() == 0, "{}: scale has no data", fn);
}

Geometry check_fp8(const char* fn, ConstTensorView weight, ConstTensorView scale, int bn, int bk,
                   size_t out_size, RowRange rows) {
  DI_CHECK(weight.dtype == DType::kF8E4M3, "{}: weight must be F8_E4M3, got {}", fn,
           dtype_name(weight.dtype));
  DI_CHECK(weight.shape.rank() == 2 && weight.shape.numel() >= 0,
           "{}: weight must have shape [N, K], got {}", fn, weight.shape);
  DI_CHECK(bn > 0 && bk > 0, "{}: block size must be positive, got {}x{}", fn, bn, bk);
  Geometry g;
  g.n = weight.shape[0];
  g.k = weight.shape[1];
  g.scale_cols = ceil_div(g.k, bk);
  check_scale(fn, scale, fp8_block_scale_shape(g.n, g.k, bn, bk), weight.shape,
              fmt::format("{}x{}", bn, bk));
  DI_CHECK(weight.data != nullptr || weight.shape.numel() == 0, "{}: weight has no data", fn);
  check_rows_and_out(fn, g, rows, out_size);
  g.weight = reinterpret_cast<const uint8_t*>(weight.data);
  g.scale = reinterpret_cast<const uint8_t*>(scale.data);
  return g;
}

Geometry check_fp4(const char* fn, ConstTensorView weight, ConstTensorView scale, size_t out_size,
                   RowRange rows) {
  DI_CHECK(weight.dtype == DType::kI8 || weight.dtype == DType::kU8,
           "{}: weight must be I8 (packed e2m1 pairs), got {}", fn, dtype_name(weight.dtype));
  DI_CHECK(weight.shape.rank() == 2 && weight.shape.numel() >= 0,
           "{}: weight must have shape [N, K/2], got {}", fn, weight.shape);
  Geometry g;
  g.n = weight.shape[0];
  g.k = 2 * weight.shape[1];
  g.scale_cols = ceil_div(g.k, kFp4BlockSize);
  check_scale(fn, scale, fp4_row_scale_shape(g.n, g.k), weight.shape, "1x32");
  DI_CHECK(weight.data != nullptr || weight.shape.numel() == 0, "{}: weight has no data", fn);
  check_rows_and_out(fn, g, rows, out_size);
  g.weight = reinterpret_cast<const uint8_t*>(weight.data);
  g.scale = reinterpret_cast<const uint8_t*>(scale.data);
  return g;
}

// Throws unless every scale byte used by rows [row_begin, row_end) lies in [lo, hi].
void check_scale_range(const char* fn, const Geometry& g, int bn, uint8_t lo, uint8_t hi,
                       const char* why) {
  if (g.row_begin == g.row_end) return;
  for (int64_t sr = g.row_begin / bn; sr <= (g.row_end - 1) / bn; ++sr) {
    for (int64_t sc = 0; sc < g.scale_cols; ++sc) {
      const uint8_t s = g.scale[sr * g.scale_cols + sc];
      DI_CHECK(s >= lo && s <= hi, "{}: scale byte {} at block [{}, {}] is outside [{}, {}], {}",
               fn, s, sr, sc, lo, hi, why);
    }
  }
}

// e4m3 code -> float, built at compile time.
constexpr std::array<float, 256> kE4m3Floats = [] {
  std::array<float, 256> table{};
  for (int c = 0; c < 256; ++c)
    table[c] = e4m3_to_float(static_cast<uint8_t>(c));
  return table;
}();

// Calls store(out_element, code, scale_byte) for every element of the rows, walking K block by
// block so each scale byte is read once per row.
template <typename Out, typename Store>
void for_each_fp8(const Geometry& g, int bn, int bk, std::span<Out> out, Store store) {
  for (int64_t row = g.row_begin; row < g.row_end; ++row) {
    const uint8_t* w_row = g.weight + row * g.k;
    const uint8_t* s_row = g.scale + (row / bn) * g.scale_cols;
    Out* o_row = out.data() + (row - g.row_begin) * g.k;
    for (int64_t kb = 0; kb < g.scale_cols; ++kb) {
      const uint8_t s = s_row[kb];
      const int64_t k_end = std::min<int64_t>((kb + 1) * bk, g.k);
      for (int64_t k = kb * bk; k < k_end; ++k)
        store(o_row[k], w_row[k], s);
    }
  }
}

// Same for FP4: store(out_element, nibble, scale_byte). K is even and every 32-element block
// starts on a byte boundary.
template <typename Out, typename Store>
void for_each_fp4(const Geometry& g, std::span<Out> out, Store store) {
  const int64_t row_bytes = g.k / 2;
  for (int64_t row = g.row_begin; row < g.row_end; ++row) {
    const uint8_t* w_row = g.weight + row * row_bytes;
    const uint8_t* s_row = g.scale + row * g.scale_cols;
    Out* o_row = out.data() + (row - g.row_begin) * g.k;
    for (int64_t kb = 0; kb < g.scale_cols; ++kb) {
      const uint8_t s = s_row[kb];
      const int64_t k_end = std::min<int64_t>((kb + 1) * kFp4BlockSize, g.k);
      for (int64_t k = kb * kFp4BlockSize; k < k_end; k += 2) {
        const uint8_t byte = w_row[k / 2];
        store(o_row[k], e2m1_lo(byte), s);
        store(o_row[k + 1], e2m1_hi(byte), s);
      }
    }
  }
}

}  // namespace

Shape fp8_block_scale_shape(int64_t n, int64_t k, int bn, int bk) {
  DI_CHECK(bn > 0 && bk > 0, "block size must be positive, got {}x{}", bn, bk);
  return {ceil_div(n, bn), ceil_div(k, bk)};
}

Shape fp4_row_scale_shape(int64_t n, int64_t k) {
  return {n, ceil_div(k, kFp4BlockSize)};
}

void dequant_fp8_blocks(ConstTensorView weight, ConstTensorView scale, int bn, int bk,
                        std::span<float> out, RowRange rows) {
  const Geometry g = check_fp8("dequant_fp8_blocks", weight, scale, bn, bk, out.size(), rows);
  for_each_fp8(g, bn, bk, out,
               [](float& o, uint8_t w, uint8_t s) { o = kE4m3Floats[w] * e8m0_to_float(s); });
}

void dequant_fp8_blocks(ConstTensorView weight, ConstTensorView scale, int bn, int bk,
                        std::span<double> out, RowRange rows) {
  const Geometry g = check_fp8("dequant_fp8_blocks", weight, scale, bn, bk, out.size(), rows);
  for_each_fp8(g, bn, bk, out,
               [](double& o, uint8_t w, uint8_t s) { o = e4m3_to_double(w) * e8m0_to_double(s); });
}

void dequant_fp8_blocks_bf16(ConstTensorView weight, ConstTensorView scale, int bn, int bk,
                             std::span<uint16_t> out, RowRange rows) {
  const char* fn = "dequant_fp8_blocks_bf16";
  const Geometry g = check_fp8(fn, weight, scale, bn, bk, out.size(), rows);
  check_scale_range(fn, g, bn, kFp8Bf16ExactMinScale, kFp8Bf16ExactMaxScale,
                    "where every e4m3 x 2^(s-127) is exact in bf16");
  // The fp32 product is exact for these scales, so its one rounding to bf16 is exact too.
  for_each_fp8(g, bn, bk, out, [](uint16_t& o, uint8_t w, uint8_t s) {
    o = e4m3_scaled_to_bf16(w, e8m0_to_float(s));
  });
}

void dequant_fp4_rows(ConstTensorView weight, ConstTensorView scale, std::span<float> out,
                      RowRange rows) {
  const Geometry g = check_fp4("dequant_fp4_rows", weight, scale, out.size(), rows);
  for_each_fp4(g, out, [](float& o, uint8_t nibble, uint8_t s) {
    o = e2m1_to_float(nibble) * e8m0_to_float(s);
  });
}

void dequant_fp4_rows(ConstTensorView weight, ConstTensorView scale, std::span<double> out,
                      RowRange rows) {
  const Geometry g = check_fp4("dequant_fp4_rows", weight, scale, out.size(), rows);
  for_each_fp4(g, out, [](double& o, uint8_t nibble, uint8_t s) {
    o = static_cast<double>(e2m1_to_float(nibble)) * e8m0_to_double(s);
  });
}

void dequant_fp4_rows_bf16(ConstTensorView weight, ConstTensorView scale, std::span<uint16_t> out,
                           RowRange rows) {
  const char* fn = "dequant_fp4_rows_bf16";
  const Geometry g = check_fp4(fn, weight, scale, out.size(), rows);
  check_scale_range(fn, g, /*bn=*/1, 0, kFp4Bf16ExactMaxScale,
                    "where every e2m1 x 2^(s-127) is exact in bf16");
  for_each_fp4(g, out, [](uint16_t& o, uint8_t nibble, uint8_t s) {
    o = e2m1_scaled_to_bf16(nibble, e8m0_to_float(s));
  });
}

}  // namespace di
