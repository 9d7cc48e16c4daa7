#pragma once

// wgmma.mma_async m64nNk32 e4m3 x e4m3 -> f32, both operands from shared memory (descriptors),
// one wrapper per N used by the FP8 GEMM (N = 8, 16, 32, 64, 128). d holds N / 2 fp32 accumulators
// per thread in the wgmma D-fragment layout; scale_d = 0 overwrites d, 1 accumulates into it.
// sm_90a only.

#include <cstdint>

#include "kernels/cuda/wgmma_operands.cuh"

namespace di::fp8_sm90 {

template <int N>
struct WgmmaE4m3;

template <>
struct WgmmaE4m3<8> {
  static constexpr int kRegs = 4;
  __device__ __forceinline__ static void mma(float* d, uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 " DI_WGMMA_DREGS4
        ", %4, %5, p, 1, 1;\n}\n"
        : DI_WGMMA_D4(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

template <>
struct WgmmaE4m3<16> {
  static constexpr int kRegs = 8;
  __device__ __forceinline__ static void mma(float* d, uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 " DI_WGMMA_DREGS8
        ", %8, %9, p, 1, 1;\n}\n"
        : DI_WGMMA_D8(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

template <>
struct WgmmaE4m3<32> {
  static constexpr int kRegs = 16;
  __device__ __forceinline__ static void mma(float* d, uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 " DI_WGMMA_DREGS16
        ", %16, %17, p, 1, 1;\n}\n"
        : DI_WGMMA_D16(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

template <>
struct WgmmaE4m3<64> {
  static constexpr int kRegs = 32;
  __device__ __forceinline__ static void mma(float* d, uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " DI_WGMMA_DREGS32
        ", %32, %33, p, 1, 1;\n}\n"
        : DI_WGMMA_D32(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

template <>
struct WgmmaE4m3<128> {
  static constexpr int kRegs = 64;
  __device__ __forceinline__ static void mma(float* d, uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DI_WGMMA_DREGS64
        ", %64, %65, p, 1, 1;\n}\n"
        : DI_WGMMA_D64(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

}  // namespace di::fp8_sm90
