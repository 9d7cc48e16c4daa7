#pragma once

// Tile-configuration dispatch of the sm_90a kernel for one weight block size; included once by
// fp8_gemm_sm90_b32.cu and once by fp8_gemm_sm90_b128.cu (heavy instantiations, one per file).

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_launch.h"

namespace di::fp8_sm90 {

template <int kBlockN, int kConsumers, int kBlock, int kStages, typename OutT>
void launch_config(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  const auto kernel = fp8_gemm_sm90_kernel<kBlockN, kConsumers, kBlock, kStages, OutT>;
  const size_t smem = sm90_smem_bytes(64 * kConsumers, kBlockN, kBlock, kStages, l.args.num_kb);
  DI_CHECK(smem == plan.smem_bytes && plan.stages == kStages,
           "fp8_gemm: plan does not match the kernel configuration");
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  kernel<<<dim3(plan.grid_n, plan.grid_m), 128 * (kConsumers + 1), smem, stream>>>(
      l.map_a, l.map_b, l.map_sa, l.args);
  DI_CUDA_CHECK(cudaGetLastError());
}

template <int kBlock, typename OutT>
void dispatch_tile(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  if (plan.block_m == 128) {
    DI_CHECK(plan.block_n == 128, "fp8_gemm: block_m 128 needs block_n 128, got {}", plan.block_n);
    launch_config<128, 2, kBlock, kPrefillStages, OutT>(plan, l, stream);
    return;
  }
  DI_CHECK(plan.block_m == 64, "fp8_gemm: unsupported block_m {}", plan.block_m);
  switch (plan.block_n) {
    case 16:
      launch_config<16, 1, kBlock, kDecodeStages, OutT>(plan, l, stream);
      break;
    case 32:
      launch_config<32, 1, kBlock, kDecodeStages, OutT>(plan, l, stream);
      break;
    case 64:
      launch_config<64, 1, kBlock, kDecodeStages, OutT>(plan, l, stream);
      break;
    case 128:
      launch_config<128, 1, kBlock, kDecodeStages, OutT>(plan, l, stream);
      break;
    default:
      DI_CHECK(false, "fp8_gemm: unsupported block_n {}", plan.block_n);
  }
}

template <int kBlock>
void launch_sm90(const Fp8GemmPlan& plan, const Sm90Launch& launch, Fp8OutDtype out_dtype,
                 cudaStream_t stream) {
  if (out_dtype == Fp8OutDtype::kBf16) {
    dispatch_tile<kBlock, __nv_bfloat16>(plan, launch, stream);
  } else {
    dispatch_tile<kBlock, float>(plan, launch, stream);
  }
}

}  // namespace di::fp8_sm90
