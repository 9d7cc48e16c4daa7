// Indexer query packing (kernels/params/indexer.h IndexQueryPackParams): the RoPE'd query heads
// become FP4 e2m1 / UE8M0-32 rows in the index-key format, so that indexer_score reads q and keys
// alike. One thread per 32-value scale block of one head row, the arithmetic of
// cpu::fp4_quant_ue8m0 / cpu::pack_index_key literally:
//   a = max(amax, 6 * 2^-126); byte = 2^ceil(log2(fp32(a * fp32(1/6)))) read off the bits of the
//   (normal) product; code = e2m1_rne(clamp(x / 2^e, +-6)) with x / 2^e one rounded division;
// dim / 2 bytes of codes (even element in the low nibble), then dim / 32 scale bytes per head.
// bf16 inputs are widened exactly. Bytes identical to the CPU packer at any width. With rope_dim
// > 0 the heads' tails are first rotated as apply_rope does (one CTA per row, the row's (cos, sin)
// table in shared memory), the values rounded to the activation storage as apply_rope stores them.

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "common/fp4.h"
#include "kernels/cuda/indexer/indexer.cuh"
#include "kernels/cuda/ops/device_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;

// One scale block of 32 values of one head row: codes and scale byte into the packed row.
__device__ __forceinline__ void pack_block(const IndexQueryPackParams& p, int64_t head_row, int b,
                                           const float (&v)[kIndexScaleBlock]) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kIndexScaleBlock; ++j)
    amax = fmaxf(amax, fabsf(v[j]));  // NaN ignored, as std::max does
  const float t = __fmul_rn(fmaxf(amax, 6.0f * 0x1p-126f), 1.0f / 6.0f);
  const uint32_t u = __float_as_uint(t);
  const uint32_t byte = (u >> 23) + ((u & 0x7FFFFFu) != 0 ? 1u : 0u);
  // x / s with s = 2^(byte - 127), byte in [1, 254], is x * 2^(127 - byte): that power of two
  // is exact in fp32 (2^-127 as a subnormal), so the product is the same exact quotient rounded
  // once — the division's result bit for bit, without the division's instruction sequence.
  const float inv_s = byte == 254u ? 0x1p-127f : __uint_as_float((254u - byte) << 23);
  const auto code = [inv_s](float x) {
    return e2m1_from_float(fminf(fmaxf(__fmul_rn(x, inv_s), -6.0f), 6.0f));
  };
  uint8_t* out = p.out + head_row * index_key_bytes(p.dim);
#pragma unroll
  for (int j = 0; j < kIndexScaleBlock; j += 2)
    out[(b * kIndexScaleBlock + j) / 2] = pack_e2m1(code(v[j]), code(v[j + 1]));
  out[p.dim / 2 + b] = static_cast<uint8_t>(byte);
}

template <typename T>
__device__ __forceinline__ void load_block(const IndexQueryPackParams& p, int64_t head_row, int b,
                                           float (&v)[kIndexScaleBlock]) {
  const T* x = static_cast<const T*>(p.q) + head_row * p.dim + b * kIndexScaleBlock;
#pragma unroll
  for (int j = 0; j < kIndexScaleBlock; ++j)
    v[j] = ops_detail::to_float(x[j]);
}

// Without RoPE: one thread per scale block, flat over all rows.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    index_query_pack_kernel(IndexQueryPackParams p, int64_t blocks) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= blocks) return;
  const int per_row = p.dim / kIndexScaleBlock;
  const int64_t head_row = i / per_row;  // row * heads + head
  const int b = static_cast<int>(i % per_row);
  float v[kIndexScaleBlock];
  load_block<T>(p, head_row, b, v);
  pack_block(p, head_row, b, v);
}

// With RoPE: one CTA per row, whose (cos, sin) table is computed once in shared memory.
template <typename T>
__global__ void __launch_bounds__(1024) index_query_rope_pack_kernel(IndexQueryPackParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ float2 s_cs[kIndexPackMaxRope / 2];
  const int64_t row = blockIdx.x;
  const int half = p.rope_dim / 2;
  for (int i = static_cast<int>(threadIdx.x); i < half; i += static_cast<int>(blockDim.x))
    s_cs[i] = ops_detail::rope_cos_sin(p.positions[row], p.rope_freqs[i]);
  __syncthreads();
  const int per_row = p.dim / kIndexScaleBlock;
  const int tail0 = p.dim - p.rope_dim;
  for (int k = static_cast<int>(threadIdx.x); k < p.heads * per_row;
       k += static_cast<int>(blockDim.x)) {
    const int64_t head_row = row * p.heads + k / per_row;
    const int b = k % per_row;
    float v[kIndexScaleBlock];
    load_block<T>(p, head_row, b, v);
    if ((b + 1) * kIndexScaleBlock > tail0) {
#pragma unroll
      for (int j = 0; j < kIndexScaleBlock; j += 2) {
        const int d = b * kIndexScaleBlock + j;
        if (d >= tail0) {
          const float2 cs = s_cs[(d - tail0) / 2];
          const float2 r = ops_detail::rope_rotate(v[j], v[j + 1], cs.x, cs.y);
          v[j] = ops_detail::round_to_storage<T>(r.x);
          v[j + 1] = ops_detail::round_to_storage<T>(r.y);
        }
      }
    }
    pack_block(p, head_row, b, v);
  }
}

}  // namespace

void index_query_pack(const IndexQueryPackParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0, "index_query_pack: rows must be >= 0, got {}", p.rows);
  DI_CHECK(p.heads >= 1 && p.dim > 0 && p.dim % kIndexScaleBlock == 0 && p.dim <= (1 << 20),
           "index_query_pack: heads {} x dim {} (heads >= 1, dim a positive multiple of {})",
           p.heads, p.dim, kIndexScaleBlock);
  if (p.rows == 0) return;
  const uintptr_t elem = p.precision == ActPrecision::kF32 ? 4 : 2;
  DI_CHECK(p.q != nullptr && p.out != nullptr && reinterpret_cast<uintptr_t>(p.q) % elem == 0,
           "index_query_pack: null or unaligned q / null out ({} rows)", p.rows);
  const int64_t blocks = p.rows * p.heads * (p.dim / kIndexScaleBlock);
  if (p.rope_dim != 0) {
    DI_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.dim &&
                 p.rope_dim <= kIndexPackMaxRope,
             "index_query_pack: rope_dim {} must be even and in [0, min(dim {}, {})]", p.rope_dim,
             p.dim, kIndexPackMaxRope);
    DI_CHECK(p.positions != nullptr && p.rope_freqs != nullptr,
             "index_query_pack: rope_dim {} needs positions and rope_freqs", p.rope_dim);
    DI_CHECK(p.rows <= INT32_MAX, "index_query_pack: {} rows is too many for one launch", p.rows);
    const int64_t per_row = blocks / p.rows;
    const auto threads = static_cast<unsigned>(std::min<int64_t>(1024, (per_row + 31) / 32 * 32));
    if (p.precision == ActPrecision::kF32) {
      cuda_detail::launch_pdl(index_query_rope_pack_kernel<float>, static_cast<unsigned>(p.rows),
                              threads, 0, stream, p);
    } else {
      cuda_detail::launch_pdl(index_query_rope_pack_kernel<uint16_t>, static_cast<unsigned>(p.rows),
                              threads, 0, stream, p);
    }
    DI_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int64_t grid = (blocks + kThreads - 1) / kThreads;
  DI_CHECK(grid <= INT32_MAX, "index_query_pack: {} rows is too many for one launch", p.rows);
  if (p.precision == ActPrecision::kF32) {
    cuda_detail::launch_pdl(index_query_pack_kernel<float>, static_cast<unsigned>(grid), kThreads,
                            0, stream, p, blocks);
  } else {
    cuda_detail::launch_pdl(index_query_pack_kernel<uint16_t>, static_cast<unsigned>(grid),
                            kThreads, 0, stream, p, blocks);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
