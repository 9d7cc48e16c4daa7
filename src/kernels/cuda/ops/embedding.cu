// Embedding gather (kernels/params/dense_ops.h): each thread moves 4 bf16 of a table row with one
// 8-byte load and writes them, widened exactly to fp32 (or as bf16), into every copy of the
// output row (hc_mult copies build the hc stream). Exact: no arithmetic besides the widening.

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/embedding.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;

// 4 bf16 (one 8-byte word) widened exactly to fp32, or kept; NaN for an id outside the table.
__device__ __forceinline__ void store4(float* out, uint2 w, bool nan) {
  const float4 v =
      nan ? make_float4(__uint_as_float(0x7FC00000u), __uint_as_float(0x7FC00000u),
                        __uint_as_float(0x7FC00000u), __uint_as_float(0x7FC00000u))
          : make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xFFFF0000u),
                        __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xFFFF0000u));
  *reinterpret_cast<float4*>(out) = v;
}
__device__ __forceinline__ void store4(uint16_t* out, uint2 w, bool nan) {
  *reinterpret_cast<uint2*>(out) = nan ? make_uint2(0x7FC07FC0u, 0x7FC07FC0u) : w;
}

// One CTA per output row; consecutive threads move consecutive 4-element chunks, so every warp
// store is one contiguous 512-byte (fp32) or 256-byte (bf16) span; no index division.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const uint16_t* table, const int64_t* ids, T* out, int64_t vocab, int64_t dim,
                     int64_t copies) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  const int64_t id = ids[row];
  const bool bad = id < 0 || id >= vocab;
  const uint16_t* src = table + (bad ? 0 : id) * dim;
  T* dst = out + row * copies * dim;
  const int chunks = static_cast<int>(dim / 4);
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += kThreads) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(src) + c);
    for (int64_t k = 0; k < copies; ++k)
      store4(dst + k * dim + 4 * c, w, bad);
  }
}

}  // namespace

void embedding_gather(const EmbeddingParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.vocab > 0 && p.copies >= 1,
           "embedding_gather: bad shape [rows {}, vocab {}, copies {}]", p.rows, p.vocab, p.copies);
  DI_CHECK(p.dim > 0 && p.dim % 8 == 0,
           "embedding_gather: dim must be a positive multiple of 8, "
           "got {}",
           p.dim);
  if (p.rows == 0) return;
  DI_CHECK(p.table != nullptr && p.ids != nullptr && p.out != nullptr,
           "embedding_gather: null table/ids/out ({} rows x {})", p.rows, p.dim);
  DI_CHECK(reinterpret_cast<uintptr_t>(p.table) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(p.out) % 16 == 0,
           "embedding_gather: table and out must be 16-byte aligned");
  DI_CHECK(p.rows <= INT32_MAX, "embedding_gather: {} rows exceed the grid", p.rows);
  const auto grid = static_cast<unsigned>(p.rows);
  if (p.precision == ActPrecision::kF32) {
    cuda_detail::launch_pdl(embedding_kernel<float>, grid, kThreads, 0, stream, p.table, p.ids,
                            static_cast<float*>(p.out), p.vocab, p.dim, p.copies);
  } else {
    cuda_detail::launch_pdl(embedding_kernel<uint16_t>, grid, kThreads, 0, stream, p.table, p.ids,
                            static_cast<uint16_t*>(p.out), p.vocab, p.dim, p.copies);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
