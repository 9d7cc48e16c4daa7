// The DSpark Markov step (kernels/params/markov.h): one CTA per draft sequence streams its logits
// row once, adds the bias row (the CPU's single fp32 add per value) and keeps each thread's best
// (value, index) over its strided values in ascending order, then a fixed tree over the CTA where
// a larger value or an equal value at a lower index wins: the argmax with the lower-index
// tie-break, whatever the launch shape of the other rows.

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/markov.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct Best {
  float v;
  int64_t i;  // -1: none yet (only NaNs seen)
};

__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}

__device__ __forceinline__ Best shfl_best(Best b, int off) {
  Best o;
  o.v = __shfl_xor_sync(0xFFFFFFFFu, b.v, off);
  o.i = __shfl_xor_sync(0xFFFFFFFFu, b.i, off);
  return o;
}

__global__ void __launch_bounds__(kThreads) markov_step_kernel(const MarkovStepParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ Best s_best[kWarps];
  const int64_t b = blockIdx.x;
  const int64_t stride = p.logits_stride > 0 ? p.logits_stride : p.vocab;
  float* row = p.logits + b * stride;
  const float* bias = p.bias + b * p.vocab;
  Best best{0.0f, -1};
  for (int64_t v = threadIdx.x; v < p.vocab; v += kThreads) {
    const float x = __fadd_rn(row[v], bias[v]);
    row[v] = x;
    // Ascending v per thread: strict > keeps the lower index of a tie.
    if (!isnan(x) && (best.i < 0 || x > best.v)) best = Best{x, v};
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    best = better(best, shfl_best(best, off));
  if (threadIdx.x % 32 == 0) s_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = s_best[threadIdx.x];  // kWarps == 32
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      best = better(best, shfl_best(best, off));
    if (threadIdx.x == 0) {
      const int64_t id = best.i < 0 ? 0 : best.i;
      p.next[b] = id;
      if (p.drafts != nullptr) p.drafts[b * p.drafts_stride] = id;
    }
  }
}

static_assert(kWarps == 32, "the second reduction level is one warp");

}  // namespace

void markov_step(const MarkovStepParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.rows <= 0x7FFFFFFF, "markov_step: rows {} out of range", p.rows);
  if (p.rows == 0) return;
  DI_CHECK(p.vocab > 0, "markov_step: vocab {} must be positive", p.vocab);
  DI_CHECK(p.logits_stride == 0 || p.logits_stride >= p.vocab,
           "markov_step: logits_stride {} is below the vocabulary {}", p.logits_stride, p.vocab);
  DI_CHECK(p.logits != nullptr && p.bias != nullptr && p.next != nullptr,
           "markov_step: null logits, bias or next ({} rows)", p.rows);
  DI_CHECK(p.drafts == nullptr || p.drafts_stride >= 1, "markov_step: drafts_stride {} < 1",
           p.drafts_stride);
  cuda_detail::launch_pdl(markov_step_kernel, static_cast<unsigned>(p.rows), kThreads, 0, stream,
                          p);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
