#pragma once

// Tile-configuration dispatch of the sm_90a kernel for one weight block size; included once by
// fp8_gemm_sm90_b32.cu and once by fp8_gemm_sm90_b128.cu (heavy instantiations, one per file).

#include <cuda_bf16.h>

#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_launch.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_prefill.cuh"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_swap.cuh"

namespace di::fp8_sm90 {

// Cluster launch of a 1 x 1 x num_chunks split-K grid (the chunk sums are combined in chunk order
// through distributed shared memory). pdl: the kernel waits for its predecessor itself
// (griddepcontrol.wait) and may start before it ends (programmatic dependent launch).
template <typename Kernel>
void launch_split(Kernel kernel, const Fp8GemmPlan& plan, const Sm90Launch& l, unsigned threads,
                  size_t smem, bool pdl, cudaStream_t stream) {
  DI_CHECK(plan.num_chunks >= 1 && plan.num_chunks <= 8, "fp8_gemm: {} K-chunks", plan.num_chunks);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(plan.grid_n, plan.grid_m, static_cast<unsigned>(plan.num_chunks));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = static_cast<unsigned>(plan.num_chunks);
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 2 : 1;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, l.map_a, l.map_b, l.args));
}

// The 64-row tiles (64 < m <= 256): one consumer warpgroup, one CTA per K-chunk of a split
// cluster.
template <int kBlockN, int kBlock, int kStages, typename OutT>
void launch_config(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  const auto kernel = fp8_gemm_sm90_kernel<kBlockN, kBlock, kStages, OutT>;
  const size_t smem = sm90_smem_bytes(64, kBlockN, kBlock, kStages, l.args.num_kb);
  DI_CHECK(smem == plan.smem_bytes && plan.stages == kStages,
           "fp8_gemm: plan does not match the kernel configuration");
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  launch_split(kernel, plan, l, 256, smem, /*pdl=*/false, stream);
}

// The persistent prefill kernel: plan.ctas CTAs walk the 128 x 128 tiles.
template <int kBlock, typename OutT, bool kFold>
void launch_prefill(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  constexpr bool kTotSmem = prefill_tot_in_smem(kBlock, kFold ? 2 : 1);
  constexpr int kStages = kTotSmem ? kPrefillFoldStages : kPrefillStages;
  const auto kernel = fp8_gemm_sm90_prefill_kernel<kBlock, kStages, OutT, kFold>;
  const size_t smem = sm90_prefill_smem_bytes(kStages, kTotSmem);
  DI_CHECK(smem == plan.smem_bytes && plan.stages == kStages && plan.persistent && plan.ctas > 0,
           "fp8_gemm: plan does not match the prefill kernel configuration");
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  kernel<<<plan.ctas, 384, smem, stream>>>(l.map_a, l.map_b, l.args);
  DI_CUDA_CHECK(cudaGetLastError());
}

template <int kTok, int kBlock, typename OutT>
void launch_swap(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  const auto run = [&](auto wgs) {
    constexpr int kWgs = decltype(wgs)::value;
    const auto kernel = fp8_gemm_sm90_swap_kernel<kTok, kBlock, kWgs, OutT>;
    const size_t smem = sm90_swap_smem_bytes(kTok, kWgs, kBlock);
    DI_CHECK(smem == plan.smem_bytes && plan.block_m == kTok && plan.block_n == 64 * kWgs &&
                 plan.stages == swap_stages(kTok, kWgs),
             "fp8_gemm: plan does not match the swapped kernel configuration");
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    launch_split(kernel, plan, l, 128 * kWgs + 32, smem, /*pdl=*/true, stream);
  };
  if (plan.swap_wgs == 2) {
    run(std::integral_constant<int, 2>{});
  } else {
    run(std::integral_constant<int, 1>{});
  }
}

template <int kBlock, typename OutT>
void dispatch_tile(const Fp8GemmPlan& plan, const Sm90Launch& l, cudaStream_t stream) {
  if (plan.swapped) {
    switch (plan.block_m) {
      case 8:
        return launch_swap<8, kBlock, OutT>(plan, l, stream);
      case 16:
        return launch_swap<16, kBlock, OutT>(plan, l, stream);
      case 32:
        return launch_swap<32, kBlock, OutT>(plan, l, stream);
      case 64:
        return launch_swap<64, kBlock, OutT>(plan, l, stream);
      default:
        DI_CHECK(false, "fp8_gemm: unsupported swapped token tile {}", plan.block_m);
    }
  }
  if (plan.block_m == 128) {
    DI_CHECK(plan.block_n == 128, "fp8_gemm: block_m 128 needs block_n 128, got {}", plan.block_n);
    if (plan.num_chunks == 1) {
      launch_prefill<kBlock, OutT, false>(plan, l, stream);
    } else {
      launch_prefill<kBlock, OutT, true>(plan, l, stream);
    }
    return;
  }
  DI_CHECK(plan.block_m == 64, "fp8_gemm: unsupported block_m {}", plan.block_m);
  switch (plan.block_n) {
    case 16:
      launch_config<16, kBlock, kDecodeStages, OutT>(plan, l, stream);
      break;
    case 32:
      launch_config<32, kBlock, kDecodeStages, OutT>(plan, l, stream);
      break;
    case 64:
      launch_config<64, kBlock, kDecodeStages, OutT>(plan, l, stream);
      break;
    case 128:
      launch_config<128, kBlock, kDecodeStages, OutT>(plan, l, stream);
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
