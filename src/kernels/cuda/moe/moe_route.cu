// MoE routing on the GPU (kernels/params/moe.h): router top-k, pair permutation, combine.
//
// moe_route: one warp per row; the row's scores live in shared memory and the top-k is k rounds
//   of a warp argmax on (selection score descending, expert id ascending). The score arithmetic
//   mirrors cpu::route_token<float> step by step: fp32 division by gate_temp, exp and log1p each
//   rounded to fp32 once (evaluated in double), fp32 sqrt and bias add, the weight sum in
//   selection order, the division by (sum + 1e-20f), the product with route_scale.
// moe_permute: a stable radix sort of the pair indices by expert id (CUB; the order of pairs of
//   one expert is their index order, row-major), expert offsets from the sorted keys, and the
//   inverse permutation.
// moe_combine: one CTA per row, fp32 sums in ascending expert id then the shared expert.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/moe/expert_tiles.cuh"
#include "kernels/cuda/moe/moe_expert.cuh"
#include "kernels/cuda/moe/moe_route.cuh"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kRouteWarps = 4;
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopk = kMoeMaxTopk;

__device__ __forceinline__ float route_score(float logit, float gate_temp) {
  const float x = logit / gate_temp;  // IEEE division, as on the CPU
  if (x > 20.0f) return sqrtf(x);     // torch softplus threshold
  const float e = static_cast<float>(exp(static_cast<double>(x)));
  const float sp = static_cast<float>(log1p(static_cast<double>(e)));
  return sqrtf(sp);
}

// The route of one row by one warp, in its slot of the shared score arrays.
struct RouteSlots {
  float score[kRouteWarps][kMaxExperts];
  float sel[kRouteWarps][kMaxExperts];
  uint8_t taken[kRouteWarps][kMaxExperts];
};

__device__ __forceinline__ void route_row(const MoeRouteParams& p, int64_t row, RouteSlots& sm,
                                          int warp, int lane) {
  __syncwarp();  // the slot's previous row is done
  const bool image = p.image_mask != nullptr && p.image_mask[row] != 0;
  const float* bias = image && p.bias_vl != nullptr ? p.bias_vl : p.bias;
  const float* logits = p.logits + row * p.experts;
  for (int e = lane; e < p.experts; e += 32) {
    const float s = route_score(logits[e], p.gate_temp);
    sm.score[warp][e] = s;
    sm.sel[warp][e] = s + bias[e];
    sm.taken[warp][e] = 0;
  }
  __syncwarp();
  int ids[kMaxTopk];
  float w[kMaxTopk];
  float sum = 0.0f;
#pragma unroll 1
  for (int j = 0; j < p.topk; ++j) {
    // Untaken experts only; a lane's first candidate is always taken, so a row whose scores are
    // -inf or NaN (a disabled expert, corrupt logits) still selects in-range, distinct experts.
    float best = -INFINITY;
    int best_e = kMaxExperts;
    for (int e = lane; e < p.experts; e += 32) {
      if (sm.taken[warp][e]) continue;
      const float v = sm.sel[warp][e];
      if (best_e == kMaxExperts || v > best) {  // ascending e per lane: ties keep the lowest id
        best = v;
        best_e = e;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, best, off);
      const int oe = __shfl_xor_sync(0xFFFFFFFFu, best_e, off);
      const bool take =
          oe != kMaxExperts && (best_e == kMaxExperts || ov > best || (ov == best && oe < best_e));
      if (take) {
        best = ov;
        best_e = oe;
      }
    }
    ids[j] = best_e;
    w[j] = sm.score[warp][best_e];
    sum += w[j];
    __syncwarp();
    if (lane == 0) sm.taken[warp][best_e] = 1;
    __syncwarp();
  }
  if (lane == 0) {
    const float scale = p.route_scale;
#pragma unroll 1
    for (int j = 0; j < p.topk; ++j) {
      float v = w[j];
      if (p.norm_topk_prob && p.topk > 1) v = v / (sum + 1e-20f);
      p.ids[row * p.topk + j] = ids[j];
      p.weights[row * p.topk + j] = v * scale;
    }
  }
}

__global__ void __launch_bounds__(32 * kRouteWarps) moe_route_kernel(const MoeRouteParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ RouteSlots sm;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (row >= p.rows) return;
  route_row(p, row, sm, warp, lane);
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) v[i] = static_cast<int32_t>(i);
}

// Expert offsets from the sorted keys (each expert boundary written by exactly one thread) and
// the inverse permutation.
__global__ void offsets_kernel(const int32_t* keys, const int32_t* pair_index, int64_t n,
                               int32_t experts, int32_t* offsets, int32_t* pair_pos) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i > n) return;
  // Ids come from moe_route (always in range); clamped anyway so that no write leaves offsets.
  const int32_t lo = i == 0 ? -1 : min(max(keys[i - 1], -1), experts);
  const int32_t hi = i == n ? experts : min(max(keys[i], -1), experts);
  for (int32_t e = lo + 1; e <= hi; ++e)
    offsets[e] = static_cast<int32_t>(i);
  if (i < n) pair_pos[pair_index[i]] = static_cast<int32_t>(i);
}

// The small-step permutation in one CTA (decode steps: a few pairs per expert): counts per
// expert, their exclusive scan (the offsets), then warp 0 places the pairs 32 at a time in index
// order, each at its expert's cursor plus its rank among the chunk's lanes of the same expert —
// the same stable order as the radix sort.
constexpr int kCountThreads = 1024;
static_assert(kCountThreads >= kMaxExperts, "one expert per thread in the scan");

struct CountArgs {
  const int32_t* ids;
  int32_t n, experts;
  int32_t* offsets;
  int32_t* pair_index;
  int32_t* pair_pos;
  MoeExpertTile* tiles;
  int32_t tile_tokens, tile_bound;
};

// The body of the counting permutation, run by all kCountThreads threads of one CTA.
__device__ __forceinline__ void permute_count(const CountArgs& a) {
  const int32_t* ids = a.ids;
  const int32_t n = a.n, experts = a.experts;
  int32_t* offsets = a.offsets;
  int32_t* pair_index = a.pair_index;
  int32_t* pair_pos = a.pair_pos;
  using Scan = cub::BlockScan<int32_t, kCountThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int32_t cursor[kMaxExperts];
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < experts) cursor[tid] = 0;
  __syncthreads();
  // Ids come from moe_route (always in range); clamped anyway so that no write leaves the arrays.
  auto expert_of = [&](int32_t i) { return min(max(ids[i], 0), experts - 1); };
  for (int32_t i = tid; i < n; i += kCountThreads)
    atomicAdd(&cursor[expert_of(i)], 1);
  __syncthreads();
  const int32_t count = tid < experts ? cursor[tid] : 0;
  int32_t start = 0;
  Scan(scan_tmp).ExclusiveSum(count, start);
  if (tid < experts) {
    offsets[tid] = start;
    cursor[tid] = start;
  }
  if (tid == 0) offsets[experts] = n;
  __syncthreads();
  if (a.tiles != nullptr) {
    // moe_expert_tiles' list from the same counts.
    __shared__ int32_t total;
    moe_detail::write_expert_tiles<kCountThreads>(scan_tmp, total, tid, start, count, a.tile_tokens,
                                                  a.tile_bound, a.tiles);
  }
  if (tid >= 32) return;
  const unsigned lower = (1u << tid) - 1u;
  for (int32_t base = 0; base < n; base += 32) {
    const int32_t i = base + tid;
    const bool valid = i < n;
    const int32_t e = valid ? expert_of(i) : -1;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
    const int32_t pos = valid ? cursor[e] + __popc(peers & lower) : 0;
    __syncwarp();
    if (valid && (peers & lower) == 0) cursor[e] += __popc(peers);  // the group's first lane
    __syncwarp();
    if (valid) {
      pair_index[pos] = i;
      pair_pos[i] = pos;
    }
  }
}

__global__ void __launch_bounds__(kCountThreads) permute_count_kernel(const CountArgs a) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  permute_count(a);
}

// moe_route then the counting permutation in one CTA (decode steps): warps 0 .. kRouteWarps - 1
// route the rows in turn, then every thread permutes the ids they wrote (visible to the CTA
// after the barrier).
__global__ void __launch_bounds__(kCountThreads)
    route_permute_kernel(const MoeRouteParams p, const CountArgs a) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ RouteSlots sm;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (warp < kRouteWarps) {
    for (int64_t row = warp; row < p.rows; row += kRouteWarps)
      route_row(p, row, sm, warp, lane);
  }
  __syncthreads();
  permute_count(a);
}

using ops_detail::load4;
using ops_detail::store4;

// grid (rows, column slices of 4 * 256): a decode row spreads over dim / 1024 CTAs. Each output
// sums the row's pairs in ascending expert id, then the shared expert (the loads are issued
// together, the adds stay in that order).
constexpr int kCombineThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(const MoeCombineParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ int32_t s_pos[kMaxTopk];
  const int64_t row = blockIdx.x;
  if (threadIdx.x == 0) {
    // The row's pairs in ascending expert id (insertion sort of <= 16).
    int32_t e[kMaxTopk], q[kMaxTopk];
    for (int j = 0; j < p.topk; ++j) {
      int32_t ej = p.ids[row * p.topk + j], qj = p.pair_pos[row * p.topk + j];
      int i = j;
      for (; i > 0 && e[i - 1] > ej; --i) {
        e[i] = e[i - 1];
        q[i] = q[i - 1];
      }
      e[i] = ej;
      q[i] = qj;
    }
    for (int j = 0; j < p.topk; ++j)
      s_pos[j] = q[j];
  }
  __syncthreads();
  const T* out = static_cast<const T*>(p.expert_out);
  const T* shared = static_cast<const T*>(p.shared);
  T* y = static_cast<T*>(p.y) + row * p.dim;
  const int64_t d = 4 * (static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x);
  if (d >= p.dim) return;
  float4 v[kMaxTopk];
#pragma unroll
  for (int j = 0; j < kMaxTopk; ++j) {
    if (j < p.topk) v[j] = load4(out + static_cast<int64_t>(s_pos[j]) * p.dim + d);
  }
  const float4 sv =
      shared != nullptr ? load4(shared + row * p.dim + d) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < kMaxTopk; ++j) {
    if (j < p.topk) {
      acc.x += v[j].x;
      acc.y += v[j].y;
      acc.z += v[j].z;
      acc.w += v[j].w;
    }
  }
  if (shared != nullptr) {
    acc.x += sv.x;
    acc.y += sv.y;
    acc.z += sv.z;
    acc.w += sv.w;
  }
  store4(y + d, acc);
}

int key_bits(int32_t experts) {
  int bits = 1;
  while ((1 << bits) < experts)
    ++bits;
  return bits;
}

size_t align256(size_t b) {
  return (b + 255) / 256 * 256;
}

size_t cub_temp_bytes(int64_t n, int32_t experts) {
  size_t bytes = 0;
  DI_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0,
      key_bits(experts)));
  return bytes;
}

}  // namespace

namespace {

void check_route(const MoeRouteParams& p) {
  DI_CHECK(p.rows >= 0 && p.rows <= INT32_MAX, "moe_route: rows {} out of range", p.rows);
  DI_CHECK(p.experts > 0 && p.experts <= kMaxExperts && p.topk >= 1 && p.topk <= kMaxTopk &&
               p.topk <= p.experts,
           "moe_route: top-{} of {} experts (at most {} of {})", p.topk, p.experts, kMaxTopk,
           kMaxExperts);
  DI_CHECK(p.gate_temp > 0.0f, "moe_route: gate_temp must be positive, got {}", p.gate_temp);
  DI_CHECK(p.rows == 0 || (p.logits != nullptr && p.bias != nullptr && p.ids != nullptr &&
                           p.weights != nullptr),
           "moe_route: null logits/bias/ids/weights");
}

void check_permute_shape(const MoePermuteParams& p) {
  DI_CHECK(p.rows >= 0 && p.topk >= 1 && p.topk <= kMaxTopk && p.experts > 0 &&
               p.experts <= kMaxExperts && p.rows * p.topk <= INT32_MAX,
           "moe_permute: bad shape rows {} topk {} experts {}", p.rows, p.topk, p.experts);
  DI_CHECK(p.offsets != nullptr, "moe_permute: null offsets");
}

// The counting permutation's checks and kernel arguments.
CountArgs count_args(const MoePermuteParams& p) {
  const int64_t n = p.rows * p.topk;
  DI_CHECK(n == 0 || (p.ids != nullptr && p.pair_index != nullptr && p.pair_pos != nullptr),
           "moe_permute: null ids/pair_index/pair_pos");
  if (p.tiles != nullptr) {
    DI_CHECK((p.tile_tokens == kMoeTileTokens || p.tile_tokens == kMoeTileTokensPrefill) &&
                 p.tile_bound == moe_expert_tile_bound(p.experts, n, p.tile_tokens),
             "moe_permute: tiles of {} pairs, list of {} (moe_expert_tile_bound)", p.tile_tokens,
             p.tile_bound);
  }
  return CountArgs{p.ids,
                   static_cast<int32_t>(n),
                   p.experts,
                   p.offsets,
                   p.pair_index,
                   p.pair_pos,
                   p.tiles,
                   p.tile_tokens,
                   static_cast<int32_t>(p.tile_bound)};
}

}  // namespace

void moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  check_route(p);
  if (p.rows == 0) return;
  const auto blocks = static_cast<unsigned>((p.rows + kRouteWarps - 1) / kRouteWarps);
  cuda_detail::launch_pdl(moe_route_kernel, blocks, 32 * kRouteWarps, 0, stream, p);
  DI_CUDA_CHECK(cudaGetLastError());
}

namespace {

// Workspace: sorted keys, the iota values, then CUB's scratch of `temp` bytes.
size_t permute_bytes(int64_t n, size_t temp) {
  return 2 * align256(static_cast<size_t>(n) * 4) + align256(temp);
}

}  // namespace

size_t moe_permute_workspace_bytes(int64_t rows, int32_t topk, int32_t experts) {
  const int64_t n = rows * topk;
  return permute_bytes(n, cub_temp_bytes(n, experts));
}

bool moe_permute(const MoePermuteParams& p, cudaStream_t stream, MoePermuteAlgo algo) {
  check_permute_shape(p);
  const int64_t n = p.rows * p.topk;
  if (algo == MoePermuteAlgo::kAuto) {
    algo = n <= kMoePermuteCountMaxPairs ? MoePermuteAlgo::kCount : MoePermuteAlgo::kRadixSort;
  }
  if (algo == MoePermuteAlgo::kCount) {
    const CountArgs a = count_args(p);
    cuda_detail::launch_pdl(permute_count_kernel, 1, kCountThreads, 0, stream, a);
    return p.tiles != nullptr;
  }
  size_t temp_bytes = 0;
  if (n > 0) {
    DI_CHECK(p.ids != nullptr && p.pair_index != nullptr && p.pair_pos != nullptr &&
                 p.workspace != nullptr,
             "moe_permute: null ids/pair_index/pair_pos/workspace");
    temp_bytes = cub_temp_bytes(n, p.experts);  // one host query per call
    const size_t need = permute_bytes(n, temp_bytes);
    DI_CHECK(p.workspace_bytes >= need, "moe_permute: workspace of {} bytes, {} needed",
             p.workspace_bytes, need);
    DI_CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0,
             "moe_permute: workspace needs 256-byte alignment");
  }
  auto* base = static_cast<uint8_t*>(p.workspace);
  auto* keys_out = reinterpret_cast<int32_t*>(base);
  auto* vals_in = reinterpret_cast<int32_t*>(base + align256(static_cast<size_t>(n) * 4));
  void* temp = base + 2 * align256(static_cast<size_t>(n) * 4);
  if (n > 0) {
    cuda_detail::launch_pdl(iota_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream,
                            vals_in, n);
    DI_CUDA_CHECK(cudaGetLastError());
    DI_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, p.ids, keys_out, vals_in,
                                                  p.pair_index, n, 0, key_bits(p.experts), stream));
  }
  cuda_detail::launch_pdl(offsets_kernel, static_cast<unsigned>((n + 1 + 255) / 256), 256, 0,
                          stream, keys_out, p.pair_index, n, p.experts, p.offsets, p.pair_pos);
  DI_CUDA_CHECK(cudaGetLastError());
  return false;
}

bool moe_route_permute(const MoeRouteParams& route, const MoePermuteParams& permute,
                       cudaStream_t stream) {
  check_route(route);
  check_permute_shape(permute);
  DI_CHECK(permute.rows == route.rows && permute.topk == route.topk &&
               permute.experts == route.experts && permute.ids == route.ids,
           "moe_route_permute: the permutation (rows {} topk {} experts {}) must read the route's "
           "ids (rows {} topk {} experts {})",
           permute.rows, permute.topk, permute.experts, route.rows, route.topk, route.experts);
  if (route.rows == 0 || route.rows > kMoeRoutePermuteMaxRows ||
      route.rows * route.topk > kMoePermuteCountMaxPairs) {
    return false;
  }
  const CountArgs a = count_args(permute);
  cuda_detail::launch_pdl(route_permute_kernel, 1, kCountThreads, 0, stream, route, a);
  DI_CUDA_CHECK(cudaGetLastError());
  return true;
}

void moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.rows <= INT32_MAX && p.topk >= 1 && p.topk <= kMaxTopk && p.dim > 0 &&
               p.dim % 4 == 0,
           "moe_combine: bad shape rows {} topk {} dim {} (dim % 4 == 0)", p.rows, p.topk, p.dim);
  if (p.rows == 0) return;
  DI_CHECK(p.expert_out != nullptr && p.ids != nullptr && p.pair_pos != nullptr && p.y != nullptr,
           "moe_combine: null expert_out/ids/pair_pos/y");
  const dim3 grid(static_cast<unsigned>(p.rows),
                  static_cast<unsigned>((p.dim + 4 * kCombineThreads - 1) / (4 * kCombineThreads)));
  if (p.precision == ActPrecision::kF32) {
    cuda_detail::launch_pdl(moe_combine_kernel<float>, grid, kCombineThreads, 0, stream, p);
  } else {
    cuda_detail::launch_pdl(moe_combine_kernel<uint16_t>, grid, kCombineThreads, 0, stream, p);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
