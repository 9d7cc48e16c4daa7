#pragma once

// wgmma.mma_async m64nNk16 bf16 x bf16 -> f32 wrappers for the sparse attention's wgmma kernel
// (sm_90a only). d holds N / 2 fp32 accumulators per thread in the wgmma D-fragment layout;
// scale_d = 0 overwrites d, 1 accumulates into it.
//   SS<N>: A and B from shared memory (descriptors), both K-major.
//   RS<N>: A from registers (four bf16x2 per thread, the layout of an m64n16 accumulator), B from
//          shared memory MN-major (imm-trans-b = 1: B's N dimension contiguous).

#include <cstdint>

#include "kernels/cuda/wgmma_operands.cuh"

namespace di::attention_detail {

template <int N>
struct WgmmaBf16SS;
template <int N>
struct WgmmaBf16RS;

template <>
struct WgmmaBf16SS<64> {
  static constexpr int kRegs = 32;
  __device__ __forceinline__ static void mma(float* d, uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " DI_WGMMA_DREGS32
        ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : DI_WGMMA_D32(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

template <>
struct WgmmaBf16RS<256> {
  static constexpr int kRegs = 128;
  __device__ __forceinline__ static void mma(float* d, const uint32_t (&a)[4], uint64_t desc_b,
                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " DI_WGMMA_DREGS128
        ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : DI_WGMMA_D128(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
};

}  // namespace di::attention_detail
