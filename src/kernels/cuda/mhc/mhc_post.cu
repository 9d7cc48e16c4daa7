// Post side of the mHC (hc_expand): out[t, k, :] = post[t, k] * y[t, :] + sum_j comb[t, j, k] *
// in[t, j, :], fp32 math in the CPU reference's order (acc = 0; acc += comb * in, j ascending;
// out = post * y + acc; no contraction), then rounded to the storage type.
//
// Memory-bound: each thread owns 16 bytes of d (8 bf16 / 4 fp32) of one token and reads y and the
// 4 copies there with 16-byte loads, then writes the 4 new copies with 16-byte stores. The 20
// coefficients of the token are loaded once per thread (L1 broadcast). In place is safe: a thread
// reads all its inputs before it writes.

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/mhc/mhc.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 128;
constexpr int kVecsPerThread = 2;

template <MhcStorage S>
struct Vec;
template <>
struct Vec<MhcStorage::kBf16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float (&f)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
  static __device__ __forceinline__ uint4 pack(const float (&f)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};
template <>
struct Vec<MhcStorage::kF32> {
  static constexpr int kElems = 4;
  static __device__ __forceinline__ void unpack(const uint4& u, float (&f)[4]) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ uint4 pack(const float (&f)[4]) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};

// grid = (ceil(vecs per row / (kThreads * kVecsPerThread)), T).
template <MhcStorage S>
__global__ void __launch_bounds__(kThreads) mhc_post_kernel(MhcPostParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr int kE = Vec<S>::kElems;
  const int64_t t = blockIdx.y;
  const int64_t vecs = p.dim / kE;
  float post[kMhcStreams], comb[kMhcStreams][kMhcStreams];
#pragma unroll
  for (int k = 0; k < kMhcStreams; ++k)
    post[k] = p.post[t * kMhcStreams + k];
#pragma unroll
  for (int j = 0; j < kMhcStreams; ++j) {
#pragma unroll
    for (int k = 0; k < kMhcStreams; ++k)
      comb[j][k] = p.comb[(t * kMhcStreams + j) * kMhcStreams + k];
  }
  const uint4* y = static_cast<const uint4*>(p.y) + t * vecs;
  const uint4* in = static_cast<const uint4*>(p.stream_in) + t * kMhcStreams * vecs;
  uint4* out = static_cast<uint4*>(p.stream_out) + t * kMhcStreams * vecs;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kThreads * kVecsPerThread + threadIdx.x;
#pragma unroll
  for (int u = 0; u < kVecsPerThread; ++u) {
    const int64_t v = v0 + u * kThreads;
    if (v >= vecs) break;
    float yv[kE], xv[kMhcStreams][kE];
    Vec<S>::unpack(y[v], yv);
#pragma unroll
    for (int j = 0; j < kMhcStreams; ++j)
      Vec<S>::unpack(in[j * vecs + v], xv[j]);
#pragma unroll
    for (int k = 0; k < kMhcStreams; ++k) {
      float o[kE];
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < kMhcStreams; ++j)
          acc = __fadd_rn(acc, __fmul_rn(comb[j][k], xv[j][e]));
        o[e] = __fadd_rn(__fmul_rn(post[k], yv[e]), acc);
      }
      out[k * vecs + v] = Vec<S>::pack(o);
    }
  }
}

// Collapse: grid = (ceil(vecs per row / kThreads), T); one 16-byte vector of one token per thread.
template <MhcStorage S>
__global__ void __launch_bounds__(kThreads) mhc_collapse_kernel(MhcCollapseParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr int kE = Vec<S>::kElems;
  const int64_t t = blockIdx.y;
  const int64_t vecs = p.dim / kE;
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (v >= vecs) return;
  const uint4* in = static_cast<const uint4*>(p.stream) + t * kMhcStreams * vecs;
  float acc[kE];
#pragma unroll
  for (int e = 0; e < kE; ++e)
    acc[e] = 0.0f;
#pragma unroll
  for (int j = 0; j < kMhcStreams; ++j) {
    const float w = p.pre[t * kMhcStreams + j];
    float xv[kE];
    Vec<S>::unpack(in[j * vecs + v], xv);
#pragma unroll
    for (int e = 0; e < kE; ++e)
      acc[e] = __fadd_rn(acc[e], __fmul_rn(w, xv[e]));
  }
  static_cast<uint4*>(p.out)[t * vecs + v] = Vec<S>::pack(acc);
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

template <MhcStorage S>
void launch_post(const MhcPostParams& p, cudaStream_t stream) {
  const int64_t vecs = p.dim / Vec<S>::kElems;
  const int64_t per_block = kThreads * kVecsPerThread;
  DI_CHECK(p.tokens <= 65535 * int64_t{1024}, "mhc_post: {} tokens is too many", p.tokens);
  // Token rows beyond the grid's y limit (65535) go in further launches.
  for (int64_t t0 = 0; t0 < p.tokens; t0 += 65535) {
    MhcPostParams q = p;
    const int64_t n = p.tokens - t0 < 65535 ? p.tokens - t0 : 65535;
    const int64_t es = static_cast<int64_t>(S == MhcStorage::kBf16 ? 2 : 4);
    q.y = static_cast<const char*>(p.y) + t0 * p.dim * es;
    q.stream_in = static_cast<const char*>(p.stream_in) + t0 * kMhcStreams * p.dim * es;
    q.stream_out = static_cast<char*>(p.stream_out) + t0 * kMhcStreams * p.dim * es;
    q.post = p.post + t0 * kMhcStreams;
    q.comb = p.comb + t0 * kMhcStreams * kMhcStreams;
    q.tokens = n;
    const dim3 grid(static_cast<unsigned>((vecs + per_block - 1) / per_block),
                    static_cast<unsigned>(n));
    cuda_detail::launch_pdl(mhc_post_kernel<S>, grid, kThreads, 0, stream, q);
    DI_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void mhc_post(const MhcPostParams& p, cudaStream_t stream) {
  DI_CHECK(p.tokens >= 0, "mhc_post: negative token count {}", p.tokens);
  DI_CHECK(p.dim > 0 && p.dim % 8 == 0, "mhc_post: dim {} must be a positive multiple of 8", p.dim);
  if (p.tokens == 0) return;
  DI_CHECK(p.y != nullptr && p.stream_in != nullptr && p.post != nullptr && p.comb != nullptr &&
               p.stream_out != nullptr,
           "mhc_post: null pointer (T={}, dim={})", p.tokens, p.dim);
  DI_CHECK(aligned(p.y, 16) && aligned(p.stream_in, 16) && aligned(p.stream_out, 16),
           "mhc_post: y / stream_in / stream_out must be 16-byte aligned");
  if (p.storage == MhcStorage::kBf16) {
    launch_post<MhcStorage::kBf16>(p, stream);
  } else {
    launch_post<MhcStorage::kF32>(p, stream);
  }
}

void mhc_collapse(const MhcCollapseParams& p, cudaStream_t stream) {
  DI_CHECK(p.tokens >= 0 && p.tokens <= 65535, "mhc_collapse: {} tokens (0..65535 per launch)",
           p.tokens);
  DI_CHECK(p.dim > 0 && p.dim % 8 == 0, "mhc_collapse: dim {} must be a positive multiple of 8",
           p.dim);
  if (p.tokens == 0) return;
  DI_CHECK(p.stream != nullptr && p.pre != nullptr && p.out != nullptr,
           "mhc_collapse: null pointer (T={}, dim={})", p.tokens, p.dim);
  DI_CHECK(aligned(p.stream, 16) && aligned(p.out, 16),
           "mhc_collapse: stream / out must be 16-byte aligned");
  const bool bf16 = p.storage == MhcStorage::kBf16;
  const int64_t vecs = p.dim / (bf16 ? 8 : 4);
  const dim3 grid(static_cast<unsigned>((vecs + kThreads - 1) / kThreads),
                  static_cast<unsigned>(p.tokens));
  if (bf16) {
    cuda_detail::launch_pdl(mhc_collapse_kernel<MhcStorage::kBf16>, grid, kThreads, 0, stream, p);
  } else {
    cuda_detail::launch_pdl(mhc_collapse_kernel<MhcStorage::kF32>, grid, kThreads, 0, stream, p);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
