// sm_90a FP8 GEMM instantiations for 32x32 weight blocks (V4.1).

#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_instantiate.cuh"

namespace di::fp8_sm90 {

template void launch_sm90<32>(const Fp8GemmPlan&, const Sm90Launch&, Fp8OutDtype, cudaStream_t);

}  // namespace di::fp8_sm90
