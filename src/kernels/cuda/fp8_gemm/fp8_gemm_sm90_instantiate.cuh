#pragma once

// Tile-configuration dispatch of the sm_90a kernel for one weight block size; included once by
// fp8_gemm_sm90_b32.cu and once by fp8_gemm_sm90_b128.cu (heavy instantiations, one per file).

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_launch.h"

namespace di::fp8_sm90 {

template <int kBlockN, int kConsumers, int kBlock, int kStages, typename OutT, bool kFold = false>
void launch_config(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  constexpr bool kSplit = kConsumers == 1;
  const auto kernel =
      fp8_gemm_sm90_kernel<kBlockN, kConsumers, kBlock, kStages, OutT, kSplit, kFold>;
  const size_t smem =
      sm90_smem_bytes(64 * kConsumers, kBlockN, kBlock, kStages, l.args.num_kb, kFold);
  DI_CHECK(smem == plan.smem_bytes && plan.stages == kStages,
           "fp8_gemm: plan does not match the kernel configuration");
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  if constexpr (kConsumers == 1) {
    // Decode: split-K over a 1 x 1 x num_chunks cluster (combined through distributed shared
    // memory in chunk order, see split_reduce_and_store).
    DI_CHECK(plan.num_chunks >= 1 && plan.num_chunks <= 8, "fp8_gemm: {} K-chunks",
             plan.num_chunks);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(plan.grid_n, plan.grid_m, static_cast<unsigned>(plan.num_chunks));
    cfg.blockDim = dim3(128 * (kConsumers + 1));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = static_cast<unsigned>(plan.num_chunks);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, l.map_a, l.map_b, l.map_sa, l.args));
  } else {
    kernel<<<dim3(plan.grid_n, plan.grid_m), 128 * (kConsumers + 1), smem, stream>>>(
        l.map_a, l.map_b, l.map_sa, l.args);
    DI_CUDA_CHECK(cudaGetLastError());
  }
}

template <int kBlock, typename OutT>
void dispatch_tile(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  if (plan.block_m == 128) {
    DI_CHECK(plan.block_n == 128, "fp8_gemm: block_m 128 needs block_n 128, got {}", plan.block_n);
    if (plan.num_chunks == 1) {
      launch_config<128, 2, kBlock, kPrefillStages, OutT, false>(plan, l, stream);
    } else {
      launch_config<128, 2, kBlock, kPrefillFoldStages, OutT, true>(plan, l, stream);
    }
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
