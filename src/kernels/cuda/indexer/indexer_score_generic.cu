// Indexer scores at widths other than the production 32 heads x 128 dims (the small test models:
// 8 x 64), bitwise equal to cpu::indexer_score<float> like the tensor-core kernel, by doing the
// reference's arithmetic literally: one thread per (query row, key), the q and k values unpacked
// exactly as cpu::unpack_index_key (e2m1 * 2^(byte - 127), one fp32 product), and
//   dot = ((b0 + b1) + b2) + ..., each 32-wide block summed sequentially from 0,
//   score = score + relu(dot_h) * w_h for heads in order,
// every product and sum rounded on its own (__fmul_rn / __fadd_rn: never contracted into FMAs).
// The query row's unpacked values and weights live in shared memory (heads * (dim + 1) floats).
// Simple rather than fast: the small models have a handful of heads and keys.

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cuda/indexer/indexer.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 128;  // keys per CTA

// Value d of a packed index-key row of width dim (cpu::unpack_index_key).
__device__ __forceinline__ float unpack_value(const uint8_t* row, int dim, int d) {
  const uint8_t byte = row[d / 2];
  const uint8_t nib = (d % 2 == 0) ? e2m1_lo(byte) : e2m1_hi(byte);
  return __fmul_rn(e2m1_to_float(nib), e8m0_to_float(row[dim / 2 + d / kIndexScaleBlock]));
}

// grid = (ceil(n_cols / kThreads), rows); dynamic shared memory heads * (dim + 1) floats.
__global__ void __launch_bounds__(kThreads) indexer_score_generic_kernel(IndexerScoreParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ float q_sm[];  // [heads, dim] unpacked q, then [heads] weights
  const int heads = p.heads;
  const int dim = p.dim;
  const int key_bytes = index_key_bytes(dim);
  const int64_t r = blockIdx.y;
  const int tid = static_cast<int>(threadIdx.x);
  const uint8_t* q = p.q + r * heads * key_bytes;
  for (int i = tid; i < heads * dim; i += kThreads)
    q_sm[i] = unpack_value(q + (i / dim) * key_bytes, dim, i % dim);
  float* w_sm = q_sm + heads * dim;
  for (int h = tid; h < heads; h += kThreads)
    w_sm[h] = p.weights[r * heads + h];
  __syncthreads();

  const auto n_cols = static_cast<int32_t>(p.n_cols);
  const int32_t t = static_cast<int32_t>(blockIdx.x) * kThreads + tid;
  if (t >= n_cols) return;
  const int32_t visible = min(max(p.row_visible[r], 0), n_cols);
  float* out = p.scores + r * p.score_stride;
  if (t >= visible) {
    out[t] = -__int_as_float(0x7F800000);
    return;
  }
  const uint8_t* k = paged_entry(p.keys, p.row_seq[r], t);
  float score = 0.0f;
  for (int h = 0; h < heads; ++h) {
    const float* qh = q_sm + h * dim;
    float dot = 0.0f;
    for (int b = 0; b < dim; b += kIndexScaleBlock) {
      float block = 0.0f;
      for (int d = b; d < b + kIndexScaleBlock; ++d)
        block = __fadd_rn(block, __fmul_rn(qh[d], unpack_value(k, dim, d)));
      dot = __fadd_rn(dot, block);
    }
    const float relu = dot < 0.0f ? 0.0f : dot;  // std::max(dot, 0) of the reference
    score = __fadd_rn(score, __fmul_rn(relu, w_sm[h]));
  }
  out[t] = score;
}

}  // namespace

namespace indexer_detail {

void indexer_score_generic(const IndexerScoreParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n_cols + kThreads - 1) / kThreads),
                  static_cast<unsigned>(p.rows));
  const size_t smem = static_cast<size_t>(p.heads) * (p.dim + 1) * sizeof(float);
  cuda_detail::launch_pdl(indexer_score_generic_kernel, grid, kThreads, smem, stream, p);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace indexer_detail
}  // namespace di
