// Exact-order linear layers (kernels/params/linear_exact.h): every output is the sequential fp32
// dot product of the CPU reference, acc = acc + x[k] * w[k] for k ascending, with unfused
// multiply and add, so the results are bitwise cpu::linear<float>'s.
//
// A CTA of 256 threads owns 32 output columns x 8 rows; per step of 32 k it decodes the weight
// tile [32 columns][32 k] and the activation tile [8 rows][32 k] into shared memory (exact fp32
// values), then every thread adds its 32 products in k order. Tail columns of k are zero-filled:
// adding +0 * 0 leaves a sum unchanged.

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cuda/linear_exact/linear_exact.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/params/wo_a.h"

namespace di {
namespace {

constexpr int kCols = 32;  // output columns per CTA
constexpr int kRows = 8;   // activation rows per pass
constexpr int kK = 32;     // k per step
constexpr int kThreads = kCols * kRows;

struct WeightView {
  ExactWeightFormat format;
  const uint8_t* w;
  const uint8_t* ws;
  int bn, bk;
  int64_t n, k, scale_cols;
};

__device__ __forceinline__ float weight_value(const WeightView& v, int64_t row, int64_t col) {
  if (v.format == ExactWeightFormat::kFp8Block || v.format == ExactWeightFormat::kFp8WoATiled) {
    const float s = e8m0_to_float(v.ws[(row / v.bn) * v.scale_cols + col / v.bk]);
    const int64_t at = v.format == ExactWeightFormat::kFp8Block ? row * v.k + col
                                                                : wo_a_code_offset(row, col, v.k);
    return __fmul_rn(e4m3_to_float(v.w[at]), s);
  }
  if (v.format == ExactWeightFormat::kBf16) {
    const auto* w16 = reinterpret_cast<const uint16_t*>(v.w);
    return __uint_as_float(static_cast<uint32_t>(w16[row * v.k + col]) << 16);
  }
  const uint8_t byte = v.format == ExactWeightFormat::kFp4ExpertTiled
                           ? fp4_expert_decode_byte(v.w[fp4_expert_code_offset(row, col / 2, v.k)])
                           : v.w[row * (v.k / 2) + col / 2];
  const uint8_t nib =
      (col & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xF);
  const float s = e8m0_to_float(v.ws[row * (v.k / 32) + col / 32]);
  return __fmul_rn(e2m1_to_float(nib), s);
}

struct Tiles {
  float w[kCols][kK + 1];  // +1: conflict-free column reads
  float x[kRows][kK];
};

// Adds the products of k range [k0, k0 + kK) for output (row slot ty, column tx) to acc.
// `xrow(r, col)` gives activation value of row slot r (or 0 past the rows).
template <typename XFn>
__device__ __forceinline__ void tile_step(Tiles& t, const WeightView& v, int64_t col0, int64_t k0,
                                          XFn xrow, float& acc) {
  for (int e = threadIdx.x; e < kCols * kK; e += kThreads) {
    const int c = e / kK, kk = e % kK;
    const int64_t row = col0 + c, col = k0 + kk;
    t.w[c][kk] = row < v.n && col < v.k ? weight_value(v, row, col) : 0.0f;
  }
  for (int e = threadIdx.x; e < kRows * kK; e += kThreads) {
    const int r = e / kK, kk = e % kK;
    const int64_t col = k0 + kk;
    t.x[r][kk] = col < v.k ? xrow(r, col) : 0.0f;
  }
  __syncthreads();
  const int tx = threadIdx.x % kCols, ty = threadIdx.x / kCols;
#pragma unroll 8
  for (int kk = 0; kk < kK; ++kk)
    acc = __fadd_rn(acc, __fmul_rn(t.x[ty][kk], t.w[tx][kk]));
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) linear_exact_kernel(LinearExactParams p, WeightView v) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ Tiles t;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t xs_cols = p.k / 32;
  auto xrow = [&](int r, int64_t col) -> float {
    const int64_t row = row0 + r;
    if (row >= p.m) return 0.0f;
    if (p.x != nullptr) return p.x[row * p.x_stride + col];
    return __fmul_rn(e4m3_to_float(p.xq[row * p.k + col]),
                     e8m0_to_float(p.xs[row * xs_cols + col / 32]));
  };
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < p.k; k0 += kK)
    tile_step(t, v, col0, k0, xrow, acc);
  const int64_t row = row0 + threadIdx.x / kCols, col = col0 + threadIdx.x % kCols;
  if (row < p.m && col < p.n) p.y[row * p.y_stride + col] = acc;
}

// grid = (mats * n / 32, tile_count): one expert tile's pairs, 8 at a time.
__global__ void __launch_bounds__(kThreads)
    grouped_linear_exact_kernel(GroupedLinearExactParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ Tiles t;
  const MoeExpertTile tile = p.tiles[blockIdx.y];
  if (tile.expert < 0) return;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kCols;  // within [0, mats * n)
  const int mat = static_cast<int>(c0 / p.n);
  const Fp4ExpertMatrix m = p.weights[mat * p.experts + tile.expert];
  const WeightView v{
      ExactWeightFormat::kFp4ExpertTiled, m.codes, m.scales, 1, 32, p.n, p.k, p.k / 32};
  const int64_t col0 = c0 - static_cast<int64_t>(mat) * p.n;
  const int64_t xs_cols = p.k / 32;
  for (int base = 0; base < tile.count; base += kRows) {
    auto xrow = [&](int r, int64_t col) -> float {
      if (base + r >= tile.count) return 0.0f;
      const int64_t pair = tile.first_pair + base + r;
      const int64_t a = p.pair_index != nullptr ? p.pair_index[pair] / p.topk : pair;
      return __fmul_rn(e4m3_to_float(p.xq[a * p.k + col]),
                       e8m0_to_float(p.xs[a * xs_cols + col / 32]));
    };
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < p.k; k0 += kK)
      tile_step(t, v, col0, k0, xrow, acc);
    const int r = threadIdx.x / kCols;
    if (base + r < tile.count) {
      const int64_t pair = tile.first_pair + base + r;
      p.out[pair * p.mats * p.n + c0 + threadIdx.x % kCols] = acc;
    }
  }
}

}  // namespace

void linear_exact(const LinearExactParams& p, cudaStream_t stream) {
  DI_CHECK(p.m >= 0 && p.n > 0 && p.k > 0, "linear_exact: bad shape m={} n={} k={}", p.m, p.n, p.k);
  DI_CHECK((p.x != nullptr) != (p.xq != nullptr && p.xs != nullptr),
           "linear_exact: give either fp32 rows x or codes xq + scales xs (m={} k={})", p.m, p.k);
  DI_CHECK(p.x != nullptr || p.k % 32 == 0, "linear_exact: quantised rows need k % 32 == 0, k={}",
           p.k);
  DI_CHECK(p.weight != nullptr &&
               (p.weight_scale != nullptr || p.format == ExactWeightFormat::kBf16) &&
               p.y != nullptr,
           "linear_exact: null weight / scale / output (n={} k={})", p.n, p.k);
  const bool fp8 =
      p.format == ExactWeightFormat::kFp8Block || p.format == ExactWeightFormat::kFp8WoATiled;
  DI_CHECK(
      p.format != ExactWeightFormat::kFp8WoATiled || (p.n % kWoATile == 0 && p.k % kWoATile == 0),
      "linear_exact: tiled wo_a codes need n {} and k {} to be multiples of {}", p.n, p.k,
      kWoATile);
  DI_CHECK(fp8                                              ? (p.bn > 0 && p.bk > 0)
           : p.format == ExactWeightFormat::kFp4Row         ? p.k % 32 == 0
           : p.format == ExactWeightFormat::kFp4ExpertTiled ? p.k % 32 == 0
                                                            : true,
           "linear_exact: bad weight blocks {}x{} for k={}", p.bn, p.bk, p.k);
  DI_CHECK(p.m <= int64_t{65535} * kRows, "linear_exact: {} rows is too many for one launch", p.m);
  if (p.m == 0) return;
  LinearExactParams q = p;
  if (q.x_stride == 0) q.x_stride = q.k;
  if (q.y_stride == 0) q.y_stride = q.n;
  DI_CHECK(q.x_stride >= q.k && q.y_stride >= q.n, "linear_exact: strides {} / {} too small",
           q.x_stride, q.y_stride);
  const WeightView v{p.format,
                     p.weight,
                     p.weight_scale,
                     p.bn,
                     p.bk,
                     p.n,
                     p.k,
                     fp8 ? (p.k + p.bk - 1) / p.bk : p.k / 32};
  const dim3 grid(static_cast<unsigned>((p.n + kCols - 1) / kCols),
                  static_cast<unsigned>((p.m + kRows - 1) / kRows));
  cuda_detail::launch_pdl(linear_exact_kernel, grid, kThreads, 0, stream, q, v);
  DI_CUDA_CHECK(cudaGetLastError());
}

void grouped_linear_exact(const GroupedLinearExactParams& p, cudaStream_t stream) {
  DI_CHECK(p.n > 0 && p.n % 32 == 0 && p.k > 0 && p.k % 32 == 0,
           "grouped_linear_exact: n {} and k {} must be positive multiples of 32", p.n, p.k);
  DI_CHECK(p.mats == 1 || p.mats == 2, "grouped_linear_exact: mats {} (1 or 2)", p.mats);
  DI_CHECK(p.experts > 0 && p.topk > 0 && p.tile_count >= 0 && p.tile_count <= 65535,
           "grouped_linear_exact: experts {} topk {} tiles {}", p.experts, p.topk, p.tile_count);
  if (p.tile_count == 0) return;
  DI_CHECK(p.xq != nullptr && p.xs != nullptr && p.tiles != nullptr && p.weights != nullptr &&
               p.out != nullptr,
           "grouped_linear_exact: null pointer (n={} k={})", p.n, p.k);
  const dim3 grid(static_cast<unsigned>(p.mats * p.n / kCols), static_cast<unsigned>(p.tile_count));
  cuda_detail::launch_pdl(grouped_linear_exact_kernel, grid, kThreads, 0, stream, p);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
