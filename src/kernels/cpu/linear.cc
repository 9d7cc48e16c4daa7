#include "kernels/cpu/linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/bf16.h"
#include "common/check.h"
#include "common/fp4.h"
#include "common/fp8.h"

namespace di::cpu {

WeightRef WeightRef::slice_rows(int64_t r0, int64_t r1) const {
  DI_CHECK(0 <= r0 && r0 <= r1 && r1 <= rows, "slice_rows [{}, {}) outside {} rows", r0, r1, rows);
  WeightRef s = *this;
  s.rows = r1 - r0;
  switch (format) {
    case WeightFormat::kDense:
      s.weight.data = weight.data + static_cast<size_t>(r0 * cols) * dtype_size(weight.dtype);
      s.weight.shape = Shape{s.rows, cols};
      break;
    case WeightFormat::kFp8Block: {
      DI_CHECK(r0 % bn == 0, "slice_rows: row {} is not on a {}-row scale block", r0, bn);
      s.weight.data = weight.data + static_cast<size_t>(r0 * cols);
      s.weight.shape = Shape{s.rows, cols};
      const int64_t scols = scale.shape[1];
      s.scale.data = scale.data + static_cast<size_t>((r0 / bn) * scols);
      s.scale.shape = Shape{(s.rows + bn - 1) / bn, scols};
      break;
    }
    case WeightFormat::kFp4Row: {
      s.weight.data = weight.data + static_cast<size_t>(r0 * (cols / 2));
      s.weight.shape = Shape{s.rows, cols / 2};
      const int64_t scols = scale.shape[1];
      s.scale.data = scale.data + static_cast<size_t>(r0 * scols);
      s.scale.shape = Shape{s.rows, scols};
      break;
    }
  }
  return s;
}

WeightRef dense_weight(const ConstTensorView& w, const std::string& name) {
  DI_CHECK(w.shape.rank() == 2, "{}: expected a matrix, got shape {}", name, w.shape);
  DI_CHECK(w.dtype == DType::kBF16 || w.dtype == DType::kF32,
           "{}: dense weight must be BF16 or "
           "F32, got {}",
           name, dtype_name(w.dtype));
  WeightRef r;
  r.format = WeightFormat::kDense;
  r.weight = w;
  r.rows = w.shape[0];
  r.cols = w.shape[1];
  return r;
}

WeightRef fp8_block_weight(const ConstTensorView& w, const ConstTensorView& scale, int bn, int bk,
                           const std::string& name) {
  DI_CHECK(w.dtype == DType::kF8E4M3 && w.shape.rank() == 2, "{}: expected F8_E4M3 [rows, cols]",
           name);
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const Shape want{(rows + bn - 1) / bn, (cols + bk - 1) / bk};
  DI_CHECK(scale.dtype == DType::kF8E8M0 && scale.shape == want,
           "{}: scale must be F8_E8M0 {}, got {} {}", name, want, dtype_name(scale.dtype),
           scale.shape);
  WeightRef r;
  r.format = WeightFormat::kFp8Block;
  r.weight = w;
  r.scale = scale;
  r.rows = rows;
  r.cols = cols;
  r.bn = bn;
  r.bk = bk;
  return r;
}

WeightRef fp4_row_weight(const ConstTensorView& w, const ConstTensorView& scale,
                         const std::string& name) {
  DI_CHECK((w.dtype == DType::kI8 || w.dtype == DType::kU8) && w.shape.rank() == 2,
           "{}: expected I8 [rows, cols/2] (packed e2m1)", name);
  const int64_t rows = w.shape[0], cols = w.shape[1] * 2;
  const Shape want{rows, (cols + 31) / 32};
  DI_CHECK(scale.dtype == DType::kF8E8M0 && scale.shape == want,
           "{}: scale must be F8_E8M0 {}, got {} {}", name, want, dtype_name(scale.dtype),
           scale.shape);
  WeightRef r;
  r.format = WeightFormat::kFp4Row;
  r.weight = w;
  r.scale = scale;
  r.rows = rows;
  r.cols = cols;
  r.bn = 1;
  r.bk = 32;
  return r;
}

namespace {

// Decode tables (immutable after first use): every e4m3 code, e2m1 nibble and e8m0 scale byte
// as an exact double.
struct DecodeTables {
  double e4m3[256];
  double e2m1[16];
  double e8m0[256];
  DecodeTables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = e4m3_to_double(static_cast<uint8_t>(i));
      e8m0[i] = e8m0_to_double(static_cast<uint8_t>(i));
    }
    for (int i = 0; i < 16; ++i)
      e2m1[i] = static_cast<double>(e2m1_to_float(static_cast<uint8_t>(i)));
  }
};

const DecodeTables& tables() {
  static const DecodeTables t;
  return t;
}

}  // namespace

template <typename T>
void decode_rows(const WeightRef& w, int64_t r0, int64_t r1, T* out) {
  const DecodeTables& lut = tables();
  const int64_t cols = w.cols;
  const auto* wb = reinterpret_cast<const uint8_t*>(w.weight.data);
  const auto* sb = reinterpret_cast<const uint8_t*>(w.scale.data);
  for (int64_t r = r0; r < r1; ++r) {
    T* o = out + (r - r0) * cols;
    switch (w.format) {
      case WeightFormat::kDense:
        if (w.weight.dtype == DType::kBF16) {
          for (int64_t c = 0; c < cols; ++c) {
            uint16_t h;
            std::memcpy(&h, wb + 2 * (r * cols + c), 2);
            o[c] = static_cast<T>(bf16_to_float(h));
          }
        } else {
          for (int64_t c = 0; c < cols; ++c) {
            float f;
            std::memcpy(&f, wb + 4 * (r * cols + c), 4);
            o[c] = static_cast<T>(f);
          }
        }
        break;
      case WeightFormat::kFp8Block: {
        const int64_t scols = w.scale.shape[1];
        const uint8_t* srow = sb + (r / w.bn) * scols;
        const uint8_t* wrow = wb + r * cols;
        for (int64_t c0 = 0; c0 < cols; c0 += w.bk) {
          const double s = lut.e8m0[srow[c0 / w.bk]];
          const int64_t c1 = std::min(cols, c0 + w.bk);
          for (int64_t c = c0; c < c1; ++c)
            o[c] = static_cast<T>(lut.e4m3[wrow[c]] * s);
        }
        break;
      }
      case WeightFormat::kFp4Row: {
        const int64_t scols = w.scale.shape[1];
        const uint8_t* srow = sb + r * scols;
        const uint8_t* wrow = wb + r * (cols / 2);
        for (int64_t c = 0; c < cols; c += 2) {
          const double s = lut.e8m0[srow[c / 32]];
          const uint8_t byte = wrow[c / 2];
          o[c] = static_cast<T>(lut.e2m1[e2m1_lo(byte)] * s);
          if (c + 1 < cols) o[c + 1] = static_cast<T>(lut.e2m1[e2m1_hi(byte)] * s);
        }
        break;
      }
    }
  }
}

template <typename T>
void linear(const T* x, int64_t m, const WeightRef& w, T* y) {
  const int64_t n = w.rows, k = w.cols;
  constexpr int64_t kRowBlock = 16;
  const int64_t nblocks = (n + kRowBlock - 1) / kRowBlock;
  // Threads only pay off on big matrices; tiny GEMMs (one token through an expert) run serially.
  const bool parallel = m * n * k >= (int64_t{1} << 18);
#pragma omp parallel if (parallel)
  {
    std::vector<T> buf(static_cast<size_t>(kRowBlock * k));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t r0 = b * kRowBlock, r1 = std::min(n, r0 + kRowBlock);
      decode_rows(w, r0, r1, buf.data());
      for (int64_t i = 0; i < m; ++i) {
        const T* xi = x + i * k;
        int64_t r = r0;
        // Four outputs at a time for instruction-level parallelism; each accumulator still adds
        // its products in ascending k, so the result is the plain sequential dot product.
        for (; r + 4 <= r1; r += 4) {
          const T* w0 = buf.data() + (r - r0) * k;
          const T* w1 = w0 + k;
          const T* w2 = w1 + k;
          const T* w3 = w2 + k;
          T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
          for (int64_t c = 0; c < k; ++c) {
            const T xv = xi[c];
            a0 += xv * w0[c];
            a1 += xv * w1[c];
            a2 += xv * w2[c];
            a3 += xv * w3[c];
          }
          y[i * n + r] = a0;
          y[i * n + r + 1] = a1;
          y[i * n + r + 2] = a2;
          y[i * n + r + 3] = a3;
        }
        for (; r < r1; ++r) {
          const T* wr = buf.data() + (r - r0) * k;
          T acc = 0;
          for (int64_t c = 0; c < k; ++c)
            acc += xi[c] * wr[c];
          y[i * n + r] = acc;
        }
      }
    }
  }
}

template void decode_rows<float>(const WeightRef&, int64_t, int64_t, float*);
template void decode_rows<double>(const WeightRef&, int64_t, int64_t, double*);
template void linear<float>(const float*, int64_t, const WeightRef&, float*);
template void linear<double>(const double*, int64_t, const WeightRef&, double*);

}  // namespace di::cpu
