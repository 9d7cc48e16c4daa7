// act_quant_e4m3 on the GPU, bit-identical to cpu::act_quant_e4m3<float> (kernels/cpu/quant.cc):
// per row and K-block of B elements, a = max(fp32 amax, 1e-4), s = 2^ceil(log2(fp32(a * fp32(1 /
// 448)))), q = e4m3_rne(clamp(x / s, +-448)). Each thread owns 8 consecutive elements (16 bytes
// of bf16, 32 of fp32); the B / 8 threads of a block reduce the amax with shuffles. The scales are
// UE8M0 bytes [m, num_kb], row-major (the layout of the fused RMSNorm + act_quant producer).

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void load8(const uint16_t* x, float (&v)[8]) {
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(x));
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);  // bf16 -> fp32 is a shift: exact
    v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void load8(const float* x, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(x));
  const float4 b = __ldg(reinterpret_cast<const float4*>(x) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// The smallest power of two >= p for a normal positive p (p >= 1e-4 / 448 here): the exponent
// field plus one when the mantissa is not zero, as e8m0_pow2ceil reads it off the bits.
__device__ __forceinline__ float pow2ceil_normal(float p) {
  const uint32_t u = __float_as_uint(p);
  const uint32_t e = (u >> 23) + ((u & 0x7FFFFFu) != 0 ? 1u : 0u);
  return __uint_as_float(e << 23);
}

template <typename In, int kBlock>
__global__ void __launch_bounds__(kThreads)
    act_quant_kernel(const In* __restrict__ x, int64_t m, int64_t k, int64_t num_kb,
                     uint8_t* __restrict__ q, uint8_t* __restrict__ scale) {
  // The GEMM that follows may start its weight-only prologue now (programmatic dependent
  // launch; it waits for this grid before it reads q / scale).
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr int kGroup = kBlock / 8;  // threads per quantisation block (4 or 16)
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t group = t / kGroup;
  const int lane_in_group = static_cast<int>(t % kGroup);
  const int64_t row = group / num_kb;
  const int64_t kb = group - row * num_kb;
  const int64_t col = kb * kBlock + lane_in_group * 8;
  const bool valid = row < m && col < k;  // k % 8 == 0: a chunk is wholly in or out

  float v[8] = {};
  if (valid) load8(x + row * k + col, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    amax = fmaxf(amax, fabsf(v[i]));
    // Every lane of the warp takes part in the shuffles (groups are aligned within the warp).
#pragma unroll
  for (int off = kGroup / 2; off > 0; off /= 2)
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
  if (!valid) return;

  const float s = pow2ceil_normal(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
  uint32_t packed[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // x / s by a power of two is exact, as on the CPU; the conversion rounds to nearest even.
      const float a = fminf(fmaxf(v[4 * h + 2 * i] / s, -448.0f), 448.0f);
      const float b = fminf(fmaxf(v[4 * h + 2 * i + 1] / s, -448.0f), 448.0f);
      const __nv_fp8x2_storage_t pair =
          __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
      word |= static_cast<uint32_t>(pair) << (16 * i);
    }
    packed[h] = word;
  }
  *reinterpret_cast<uint2*>(q + row * k + col) = make_uint2(packed[0], packed[1]);
  if (lane_in_group == 0) scale[row * num_kb + kb] = static_cast<uint8_t>(__float_as_uint(s) >> 23);
}

template <typename In>
void launch(const Fp8ActQuantParams& p, const In* x, cudaStream_t stream) {
  const int64_t num_kb = (p.k + p.block - 1) / p.block;
  const int64_t threads = p.m * num_kb * (p.block / 8);
  const auto grid = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  if (p.block == 32) {
    cuda_detail::launch_pdl(act_quant_kernel<In, 32>, grid, kThreads, 0, stream, x, p.m, p.k,
                            num_kb, p.q, p.scale);
  } else {
    cuda_detail::launch_pdl(act_quant_kernel<In, 128>, grid, kThreads, 0, stream, x, p.m, p.k,
                            num_kb, p.q, p.scale);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void fp8_act_quant(const Fp8ActQuantParams& p, cudaStream_t stream) {
  DI_CHECK(p.block == 32 || p.block == 128, "fp8_act_quant: block must be 32 or 128, got {}",
           p.block);
  DI_CHECK(p.m >= 0 && p.k >= 0 && p.k % 16 == 0,
           "fp8_act_quant: bad shape [{}, {}] (k must be a multiple of 16)", p.m, p.k);
  if (p.m == 0 || p.k == 0) return;
  DI_CHECK(p.x != nullptr && p.q != nullptr && p.scale != nullptr,
           "fp8_act_quant: null x/q/scale pointer");
  DI_CHECK(aligned16(p.x) && aligned16(p.q), "fp8_act_quant: x and q must be 16-byte aligned");
  DI_CHECK(p.m * (p.k / 8) < (int64_t{1} << 31) * kThreads, "fp8_act_quant: [{}, {}] too large",
           p.m, p.k);
  if (p.x_dtype == Fp8ActDtype::kBf16) {
    launch(p, static_cast<const uint16_t*>(p.x), stream);
  } else {
    launch(p, static_cast<const float*>(p.x), stream);
  }
}

}  // namespace di
