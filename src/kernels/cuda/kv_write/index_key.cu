// Index-key projection of the owners (kernels/params/kv_write.h IndexKeyParams): one CTA of 128
// threads per kIndexKeyGroupsPerCta emitted groups. Thread j computes output j of every group of
// the CTA: k[g][j] = sum_c latent[g][c] * wk[j][c] accumulated one product at a time in ascending
// c (cpu::linear's order, unfused), the groups' chains interleaved for instruction-level
// parallelism and each wk row read once per CTA (128 x 512 bf16 = 128 KiB, L2-resident across
// CTAs). Then k_norm (one thread per group, sequential), RoPE on the last 64 at group * ratio, and
// FP4 e2m1 with UE8M0 per 32 (one warp per scale block) into the 68-byte index-key entry.
// Other widths (IndexKeyParams::latent_dim / dim / rope_dim): index_key_generic_kernel, one CTA per
// group, the same arithmetic in the same orders on rows in dynamic shared memory.

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/kv_write/kv_write.cuh"
#include "kernels/cuda/paged_table_check.h"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

using kv_write_detail::kThreads;
static_assert(kThreads == kIndexDim && kIndexDim / kIndexScaleBlock == kThreads / 32);

// Decode CTAs (kG = 1) stage wk in dynamic shared memory, rows kWkRowBytes apart: thread j's
// 16-byte reads of its row then hit 8 different bank quads within each quarter warp.
constexpr int kWkRowBytes = kKvDim * 2 + 16;
constexpr size_t kWkStageBytes = size_t{kIndexDim} * kWkRowBytes;  // 130 KiB

// kG groups per CTA: kIndexKeyGroupsPerCta for prefill (wk read once per 8 groups), 1 for decode
// steps (a group per CTA: no chains computed for absent groups, more CTAs in flight). A group's
// arithmetic is the same in both. With kG = 1 the CTA copies all of wk into shared memory with
// cp.async before waiting for the preceding launch (wk is a weight): a thread's 1 KiB row used
// to arrive in 16 dependent rounds of 8 loads (~19 us a launch at batch 1), now in one.
template <int kG>
__global__ void __launch_bounds__(kThreads) index_key_kernel(IndexKeyParams p) {
  [[maybe_unused]] extern __shared__ __align__(16) uint8_t wk_stage[];
  if constexpr (kG == 1) {
    const auto* src = reinterpret_cast<const uint8_t*>(p.wk);
    constexpr int kPieces = kKvDim * 2 / 16;  // 16-byte pieces of a row
    for (int q = static_cast<int>(threadIdx.x); q < kIndexDim * kPieces; q += kThreads) {
      const int r = q / kPieces, c = q % kPieces;
      cuda_detail::cp_async16(wk_stage + r * kWkRowBytes + 16 * c, src + r * (kKvDim * 2) + 16 * c,
                              true);
    }
    cuda_detail::cp_async_commit();
  }
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ __align__(16) float lat[kG][kKvDim];  // 16 KiB
  __shared__ __align__(16) float k[kG][kIndexDim];
  __shared__ float scale[kG];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t g0 = static_cast<int64_t>(blockIdx.x) * kG;
  const int ng = static_cast<int>(p.groups - g0 < kG ? p.groups - g0 : kG);

  // Latents of the CTA's groups; missing groups (last CTA) are zeros, computed and never stored.
  for (int g = 0; g < kG; ++g) {
    const float4 v = g < ng
                         ? *reinterpret_cast<const float4*>(p.latent + (g0 + g) * kKvDim + 4 * tid)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<float4*>(&lat[g][4 * tid]) = v;
  }
  __syncthreads();

  float acc[kG];
#pragma unroll
  for (int g = 0; g < kG; ++g)
    acc[g] = 0.0f;
  if constexpr (kG == 1) {
    cuda_detail::cp_async_wait<0>();
    __syncthreads();
    // Eight columns per step from the staged row; the same sequential chain.
    const uint8_t* wrow = wk_stage + tid * kWkRowBytes;
#pragma unroll 4
    for (int c8 = 0; c8 < kKvDim / 8; ++c8) {
      const uint4 w8 = *reinterpret_cast<const uint4*>(wrow + 16 * c8);
      const uint32_t ww[4] = {w8.x, w8.y, w8.z, w8.w};
      const float4 l0 = *reinterpret_cast<const float4*>(&lat[0][8 * c8]);
      const float4 l1 = *reinterpret_cast<const float4*>(&lat[0][8 * c8 + 4]);
      const float l[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
      float a = acc[0];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a = __fadd_rn(a, __fmul_rn(l[2 * i], __uint_as_float(ww[i] << 16)));
        a = __fadd_rn(a, __fmul_rn(l[2 * i + 1], __uint_as_float(ww[i] & 0xFFFF0000u)));
      }
      acc[0] = a;
    }
  } else {
    // Four columns per step: one 8-byte load of wk, one 16-byte shared load per group; each
    // group's sum still adds its products one at a time in ascending column order.
    const uint2* wrow = reinterpret_cast<const uint2*>(p.wk + static_cast<int64_t>(tid) * kKvDim);
#pragma unroll 8  // independent wk loads in flight (the chains stay sequential)
    for (int c4 = 0; c4 < kKvDim / 4; ++c4) {
      const uint2 w4 = __ldg(wrow + c4);
      // bf16 -> fp32 is exact: the bits shifted into the high half.
      const float w0 = __uint_as_float(w4.x << 16);
      const float w1 = __uint_as_float(w4.x & 0xFFFF0000u);
      const float w2 = __uint_as_float(w4.y << 16);
      const float w3 = __uint_as_float(w4.y & 0xFFFF0000u);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const float4 l = *reinterpret_cast<const float4*>(&lat[g][4 * c4]);
        float a = acc[g];
        a = __fadd_rn(a, __fmul_rn(l.x, w0));
        a = __fadd_rn(a, __fmul_rn(l.y, w1));
        a = __fadd_rn(a, __fmul_rn(l.z, w2));
        a = __fadd_rn(a, __fmul_rn(l.w, w3));
        acc[g] = a;
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kG; ++g)
    k[g][tid] = acc[g];
  __syncthreads();

  // k_norm: thread g sums group g's squares in ascending order (cpu::rms_rsqrt<float>).
  if (tid < kG) scale[tid] = kv_write_detail::rms_scale_sequential(k[tid], kIndexDim, p.eps);
  __syncthreads();
  const float nw = p.norm_weight[tid];
#pragma unroll
  for (int g = 0; g < kG; ++g)
    k[g][tid] = __fmul_rn(nw, __fmul_rn(k[g][tid], scale[g]));
  __syncthreads();

  // RoPE: kG groups x 32 pairs over the 128 threads.
  for (int i = tid; i < ng * (kKvRopeDim / 2); i += kThreads) {
    const int g = i / (kKvRopeDim / 2);
    const int64_t pos = p.group[g0 + g] * p.ratio;
    kv_write_detail::rope_pair(&k[g][kIndexDim - kKvRopeDim], i % (kKvRopeDim / 2), pos, p.freqs);
  }
  __syncthreads();

  // FP4 / UE8M0-32 (cpu::pack_index_key): warp b quantizes scale block b of every group:
  // a = max(amax, 6 * 2^-126), scale byte = 2^ceil(log2(fp32(a * fp32(1/6)))) read off the bits
  // of the (normal) product, value code = e2m1(clamp(x / 2^e, +-6)).
  const int lane = tid & 31;
  const int b = tid / 32;
  for (int g = 0; g < ng; ++g) {  // ng is uniform over the CTA: the shuffles stay converged
    const float v = k[g][tid];
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float t = __fmul_rn(fmaxf(amax, 6.0f * 0x1p-126f), 1.0f / 6.0f);
    const uint32_t u = __float_as_uint(t);
    const uint32_t byte = (u >> 23) + ((u & 0x7FFFFFu) != 0 ? 1u : 0u);
    const float s = __uint_as_float(byte << 23);  // byte in [1, 254]: a normal power of two
    const uint8_t nib = kv_write_detail::e2m1_scaled(v, s);
    const auto odd = static_cast<uint8_t>(__shfl_down_sync(0xffffffffu, nib, 1));
    uint8_t* entry = paged_entry(p.table, p.seq[g0 + g], p.group[g0 + g]);
    if (lane % 2 == 0) entry[tid / 2] = pack_e2m1(nib, odd);
    if (lane == 0) entry[kIndexDim / 2 + b] = static_cast<uint8_t>(byte);
  }
}

// Any supported width, one CTA per group: lat = [latent_dim] latent, k = [dim] key in dynamic
// shared memory (latent_dim % 4 == 0 keeps k 16-byte aligned). Thread j computes outputs j,
// j + kThreads, ... each as one sequential unfused chain over ascending c (cpu::linear's order).
__global__ void __launch_bounds__(kThreads) index_key_generic_kernel(IndexKeyParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ __align__(16) float smem[];
  __shared__ float scale;
  float* lat = smem;
  float* k = smem + p.latent_dim;
  const int64_t g = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int latent_dim = p.latent_dim;
  const int dim = p.dim;
  for (int c = tid; c < latent_dim; c += kThreads)
    lat[c] = p.latent[g * latent_dim + c];
  __syncthreads();
  for (int j = tid; j < dim; j += kThreads) {
    const uint16_t* wrow = p.wk + static_cast<int64_t>(j) * latent_dim;
    float acc = 0.0f;
    for (int c = 0; c < latent_dim; ++c) {
      // bf16 -> fp32 is exact: the bits shifted into the high half.
      const float w = __uint_as_float(static_cast<uint32_t>(__ldg(wrow + c)) << 16);
      acc = __fadd_rn(acc, __fmul_rn(lat[c], w));
    }
    k[j] = acc;
  }
  __syncthreads();
  kv_write_detail::rms_norm_row_generic(k, p.norm_weight, dim, p.eps, &scale);
  kv_write_detail::rope_row_generic(k, dim, p.rope_dim, p.group[g] * p.ratio, p.freqs);
  kv_write_detail::store_index_key_generic(k, dim, paged_entry(p.table, p.seq[g], p.group[g]));
}

}  // namespace

void index_key_write(const IndexKeyParams& p, cudaStream_t stream) {
  DI_CHECK(p.groups >= 0 && p.groups <= INT32_MAX, "index_key_write: {} groups", p.groups);
  DI_CHECK(p.ratio >= 1, "index_key_write: ratio must be >= 1, got {}", p.ratio);
  DI_CHECK(p.eps >= 0.0f, "index_key_write: eps must be >= 0, got {}", p.eps);
  const bool production =
      kv_write_detail::check_width("index_key_write", p.dim, p.rope_dim, kIndexDim) &&
      p.latent_dim == kKvDim;
  DI_CHECK(p.latent_dim > 0 && p.latent_dim % 4 == 0 && p.latent_dim + p.dim <= kKvGenericMaxFloats,
           "index_key_write: latent_dim {} must be a positive multiple of 4 with latent_dim + dim "
           "<= {} (dim {})",
           p.latent_dim, kKvGenericMaxFloats, p.dim);
  check_paged_table("index_key_write", p.table, index_key_bytes(p.dim));
  if (p.groups == 0) return;
  DI_CHECK(p.latent != nullptr && p.wk != nullptr && p.norm_weight != nullptr &&
               p.freqs != nullptr && p.seq != nullptr && p.group != nullptr,
           "index_key_write: null latent/wk/norm_weight/freqs/seq/group ({} groups)", p.groups);
  DI_CHECK(reinterpret_cast<uintptr_t>(p.latent) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(p.wk) % 16 == 0,
           "index_key_write: latent and wk must be 16-byte aligned");
  if (production) {
    // Up to 256 groups (decode steps of up to 256 sequences, small chunks): one group per CTA.
    constexpr int kG = kIndexKeyGroupsPerCta;
    if (p.groups <= 256) {
      DI_CUDA_CHECK(cudaFuncSetAttribute(index_key_kernel<1>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kWkStageBytes)));
      cuda_detail::launch_pdl(index_key_kernel<1>, static_cast<unsigned>(p.groups), kThreads,
                              kWkStageBytes, stream, p);
    } else {
      const auto grid = static_cast<unsigned>((p.groups + kG - 1) / kG);
      cuda_detail::launch_pdl(index_key_kernel<kG>, grid, kThreads, 0, stream, p);
    }
  } else {
    const size_t smem = static_cast<size_t>(p.latent_dim + p.dim) * sizeof(float);
    cuda_detail::launch_pdl(index_key_generic_kernel, static_cast<unsigned>(p.groups), kThreads,
                            smem, stream, p);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
