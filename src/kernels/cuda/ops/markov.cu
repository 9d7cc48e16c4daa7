// The DSpark Markov step (kernels/params/markov.h): each draft sequence's row is split over a
// cluster of kCluster CTAs (one CTA streaming 1.5 MB of a 129,280-entry row would take tens of
// µs). A CTA adds the bias to its slice in place (the CPU's single fp32 add per value) and keeps
// each thread's best (value, index) over its strided values in ascending order, then a tree over
// the CTA; rank 0 combines the CTAs' bests through distributed shared memory. "Larger value, or
// equal value at a lower index" is a total order on the non-NaN entries, so the result is the
// argmax with the lower-index tie-break whatever the reduction shape or the other rows.

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/markov.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCluster = 8;  // CTAs per row (portable cluster size)

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

// Grid (rows, kCluster), one cluster per row.
__global__ void __launch_bounds__(kThreads) markov_step_kernel(const MarkovStepParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ Best s_best[kWarps];
  __shared__ Best s_cta;
  const int64_t b = blockIdx.x;
  const auto rank = static_cast<int64_t>(cluster.block_rank());
  const int64_t per = (p.vocab + kCluster - 1) / kCluster;
  const int64_t v0 = rank * per, v1 = v0 + per < p.vocab ? v0 + per : p.vocab;
  const int64_t stride = p.logits_stride > 0 ? p.logits_stride : p.vocab;
  float* row = p.logits + b * stride;
  const float* bias = p.bias + b * p.vocab;
  Best best{0.0f, -1};
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
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
    if (threadIdx.x == 0) s_cta = best;
  }
  cluster.sync();  // every CTA's best is in its shared memory
  if (rank == 0 && threadIdx.x == 0) {
    Best all = s_cta;
    for (int c = 1; c < kCluster; ++c)
      all = better(all, *cluster.map_shared_rank(&s_cta, c));
    const int64_t id = all.i < 0 ? 0 : all.i;
    p.next[b] = id;
    if (p.drafts != nullptr) p.drafts[b * p.drafts_stride] = id;
  }
  cluster.sync();  // rank 0 has read the others' shared memory
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
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(p.rows), kCluster, 1);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2]{};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = kCluster;
  attr[0].val.clusterDim.z = 1;
  attr[1] = cuda_detail::pdl_attribute();  // the kernel waits first (kernels/cuda/pdl.cuh)
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, markov_step_kernel, p));
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
