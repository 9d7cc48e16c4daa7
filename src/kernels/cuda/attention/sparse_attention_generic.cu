// Dimension-generic CSA2 sparse attention (kernels/params/sparse_attention.h) for the heads x
// head_dim shapes the tensor-core kernel (sparse_attention.cu, 64 x 512 only) is not built for:
// the small fixture models. Exact and simple rather than fast. One CTA of 128 threads per
// (query row, head), fp32 CUDA-core math on the dequantised entry values (bitwise the values of
// cpu::unpack_*: an e4m3 code times a power of two, or an e2m1 value times an e4m3 scale, is
// exact in fp32):
// 1. the addresses of the row's entries (window positions, then top-k slots; nullptr = masked;
//    a DSpark draft block: the ring before the block, then the block's own entries) and the
//    head's q row into shared memory;
// 2. scores s_e = (q . kv_e) * scale * log2(e), one warp per entry: lane l sums the dims l, l + 32,
//    ... in ascending order (fp32 fma), then a fixed xor butterfly;
// 3. M = max_e s_e, p_e = 2^(s_e - M), their sum in a fixed order (thread-strided, butterfly,
//    warps in order); every thread accumulates O[d] = sum_e p_e kv_e[d] over the entries in order
//    for its pairs of dims, divides by the sum plus the sink term 2^(sink * log2(e) - M), applies
//    the inverse RoPE to the tail pairs and stores in the activation precision.
// Every reduction has one order fixed by the block shape, never by the batch: rows are
// batch-invariant, and the output is deterministic.

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/cuda/attention/sparse_attention.cuh"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace attention_detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPairs = kAttnGenericMaxDim / 2 / kThreads;  // dim pairs per thread
constexpr float kLog2e = 1.4426950408889634f;

using ops_detail::store1;
using ops_detail::to_float;

// Entries of a row after the window's: the top-k slots, or a draft block's own entries.
__host__ __device__ __forceinline__ int extra_entries(const SparseAttnParams& p) {
  return p.block_rows > 0 ? p.block_rows : p.topk_width;
}

// Address of entry e of a row (e < window: window position pos - window + 1 + e, from the ring or
// chunk_kv; else top-k slot e - window), nullptr when masked. A draft block (block_rows > 0):
// e < window is ring position chunk_start - window + e, else block entry e - window of chunk_kv.
// The same rules as the tensor-core kernel's entry table.
__device__ const uint8_t* entry_address(const SparseAttnParams& p, int row, int64_t seq,
                                        int64_t pos, int e) {
  if (p.block_rows > 0) {
    const int64_t cs = p.chunk_start[row];
    if (e < p.window) {
      const int64_t t = cs - p.window + e;
      return t >= 0 ? paged_entry(p.swa, seq,
                                  static_cast<int64_t>(p.ring_block) * p.window + t % p.window)
                    : nullptr;
    }
    return p.chunk_kv + (p.chunk_row0[row] + (e - p.window)) * swa_entry_bytes(p.head_dim);
  }
  if (e < p.window) {
    const int64_t t = pos - p.window + 1 + e;
    const int64_t cs = p.chunk_start[row];
    if (t >= 0 && t < cs) {
      return paged_entry(p.swa, seq, static_cast<int64_t>(p.ring_block) * p.window + t % p.window);
    }
    if (t >= cs && p.chunk_kv != nullptr) {
      return p.chunk_kv + (p.chunk_row0[row] + (t - cs)) * swa_entry_bytes(p.head_dim);
    }
    return nullptr;
  }
  const int32_t idx = p.topk[static_cast<int64_t>(row) * p.topk_width + (e - p.window)];
  return idx >= 0 && idx < p.comp_entries ? paged_entry(p.comp, seq, idx) : nullptr;
}

// Values d and d + 1 (d even) of an entry: SWA (e4m3 codes, UE8M0 per 32) or compressed (e2m1
// pairs, e4m3 per 16). Both lie in one scale block.
__device__ __forceinline__ float2 swa_pair(const uint8_t* e, int dim, int d) {
  const float s = e8m0_to_float(__ldg(e + dim + d / kSwaScaleBlock));
  return make_float2(e4m3_to_float(__ldg(e + d)) * s, e4m3_to_float(__ldg(e + d + 1)) * s);
}
__device__ __forceinline__ float2 comp_pair(const uint8_t* e, int dim, int d) {
  const float s = e4m3_to_float(__ldg(e + dim / 2 + d / kCompScaleBlock));
  const uint8_t b = __ldg(e + d / 2);
  return make_float2(e2m1_to_float(e2m1_lo(b)) * s, e2m1_to_float(e2m1_hi(b)) * s);
}
__device__ __forceinline__ float entry_value(const uint8_t* e, bool swa, int dim, int d) {
  if (swa) {
    return e4m3_to_float(__ldg(e + d)) * e8m0_to_float(__ldg(e + dim + d / kSwaScaleBlock));
  }
  const uint8_t b = __ldg(e + d / 2);
  return e2m1_to_float(d % 2 == 0 ? e2m1_lo(b) : e2m1_hi(b)) *
         e4m3_to_float(__ldg(e + dim / 2 + d / kCompScaleBlock));
}

// Sum (or max) of one value per thread in a fixed order: xor butterfly in each warp, then the
// warps in order; every thread gets the result. s_red: kWarps floats, free before and after.
template <bool kMax>
__device__ float block_reduce(float v, float* s_red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xFFFFFFFFu, v, off);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  if (threadIdx.x % 32 == 0) s_red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = s_red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w)
    r = kMax ? fmaxf(r, s_red[w]) : r + s_red[w];
  __syncthreads();  // s_red is free again
  return r;
}

// Shared memory: [n] entry addresses, [n] scores then weights, [head_dim] q, [kWarps] reduction.
int smem_bytes(const SparseAttnParams& p) {
  const int n = p.window + extra_entries(p);
  return n * static_cast<int>(sizeof(void*) + sizeof(float)) +
         (p.head_dim + kWarps) * static_cast<int>(sizeof(float));
}

// T = float or uint16_t (bf16 bits) activations. Grid (rows, heads).
template <typename T>
__global__ void __launch_bounds__(kThreads) sparse_attn_generic_kernel(const SparseAttnParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ __align__(16) uint8_t smem[];
  const int n = p.window + extra_entries(p);
  const bool all_swa = p.block_rows > 0;  // a draft block's entries are SWA entries too
  const int dim = p.head_dim;
  const uint8_t** s_ptr = reinterpret_cast<const uint8_t**>(smem);
  float* s_p = reinterpret_cast<float*>(s_ptr + n);
  float* s_q = s_p + n;
  float* s_red = s_q + dim;

  const int row = blockIdx.x;
  const int h = blockIdx.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t seq = p.seq[row];
  const int64_t pos = p.pos[row];
  const int64_t qo = (static_cast<int64_t>(row) * p.heads + h) * dim;

  for (int e = tid; e < n; e += kThreads)
    s_ptr[e] = entry_address(p, row, seq, pos, e);
  // q_rope: the tail pairs rotated as apply_rope does (and rounded to the storage as it stores).
  const T* q = static_cast<const T*>(p.q) + qo;
  const int tail0 = dim - p.rope_dim;
  for (int d = 2 * tid; d < dim; d += 2 * kThreads) {
    float a = to_float(q[d]), b = to_float(q[d + 1]);
    if (p.q_rope && d >= tail0) {
      const float2 cs = ops_detail::rope_cos_sin(pos, p.rope_freqs[(d - tail0) / 2]);
      const float2 r = ops_detail::rope_rotate(a, b, cs.x, cs.y);
      a = ops_detail::round_to_storage<T>(r.x);
      b = ops_detail::round_to_storage<T>(r.y);
    }
    s_q[d] = a;
    s_q[d + 1] = b;
  }
  __syncthreads();

  // Scores in the log2 domain; -inf for masked entries (a warp-uniform branch).
  const float qk_scale = p.scale * kLog2e;
  for (int e = warp; e < n; e += kWarps) {
    const uint8_t* kv = s_ptr[e];
    if (kv == nullptr) {
      if (lane == 0) s_p[e] = -INFINITY;
      continue;
    }
    const bool swa = all_swa || e < p.window;
    float acc = 0.0f;
    for (int d = lane; d < dim; d += 32)
      acc = fmaf(s_q[d], entry_value(kv, swa, dim, d), acc);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
    if (lane == 0) s_p[e] = acc * qk_scale;
  }
  __syncthreads();

  float mx = -INFINITY;
  for (int e = tid; e < n; e += kThreads)
    mx = fmaxf(mx, s_p[e]);
  mx = block_reduce<true>(mx, s_red);
  float sum = 0.0f;
  for (int e = tid; e < n; e += kThreads) {
    const float s = s_p[e];
    const float w = (mx == -INFINITY || s == -INFINITY) ? 0.0f : exp2f(s - mx);
    s_p[e] = w;
    sum += w;
  }
  sum = block_reduce<false>(sum, s_red);  // its barrier also publishes the weights

  // O for the dim pairs 2 j, 2 j + 1 with j = tid + 128 i, entries in order. A zero weight (masked
  // or underflowed) would add exact zeros: skipped.
  float2 o[kMaxPairs];
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i)
    o[i] = make_float2(0.0f, 0.0f);
  for (int e = 0; e < n; ++e) {
    const float w = s_p[e];
    if (w == 0.0f) continue;
    const uint8_t* kv = s_ptr[e];
    const bool swa = all_swa || e < p.window;
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const int d = 2 * (tid + kThreads * i);
      if (d < dim) {
        const float2 v = swa ? swa_pair(kv, dim, d) : comp_pair(kv, dim, d);
        o[i].x = fmaf(w, v.x, o[i].x);
        o[i].y = fmaf(w, v.y, o[i].y);
      }
    }
  }
  // Nothing visible: the output is zero (the sink alone), as in the reference.
  const float inv = mx == -INFINITY ? 0.0f : 1.0f / (sum + exp2f(p.sink[h] * kLog2e - mx));

  T* out = static_cast<T*>(p.out) + qo;
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    const int d = 2 * (tid + kThreads * i);
    if (d >= dim) break;
    float a = o[i].x * inv, b = o[i].y * inv;
    if (d >= tail0) {  // the inverse rotation
      const float2 cs = ops_detail::rope_cos_sin(pos, p.rope_freqs[(d - tail0) / 2]);
      const float2 r = ops_detail::rope_rotate(a, b, cs.x, -cs.y);
      a = r.x;
      b = r.y;
    }
    store1(out + d, a);
    store1(out + d + 1, b);
  }
}

template <typename T>
void launch(const SparseAttnParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.heads));
  cuda_detail::launch_pdl(sparse_attn_generic_kernel<T>, grid, kThreads,
                          static_cast<size_t>(smem_bytes(p)), stream, p);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_sparse_attention_generic(const SparseAttnParams& p, cudaStream_t stream) {
  // The limits the launcher checks keep the shared memory under the 48 KiB default:
  // (128 + 2048) entries x 12 B + 1024 x 4 B of q.
  static_assert((kAttnChunk + kAttnGenericMaxTopk) * 12 + (kAttnGenericMaxDim + kWarps) * 4 <=
                48 * 1024);
  if (p.precision == ActPrecision::kF32) {
    launch<float>(p, stream);
  } else {
    launch<uint16_t>(p, stream);
  }
}

}  // namespace attention_detail
}  // namespace di
