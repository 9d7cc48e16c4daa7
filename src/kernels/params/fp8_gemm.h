#pragma once

// Params of the block-scaled FP8 GEMM with fused activation quantisation (issue 6):
//   y[m, n] = sum_kb ( sum_{k in kb} e4m3(x)[m, k] * e4m3(W)[n, k] ) * s_x[m, kb] * s_w[n / B, kb]
// with x quantised per row per K-block of B elements exactly like cpu::act_quant_e4m3 (UE8M0
// power-of-two scales) and W an e4m3 [n, k] weight with one UE8M0 scale per B x B block.
// B = 32 (V4.1) or 128 (V4-Flash). Framework-free and backend-free: no CUDA types here.

#include <cstddef>
#include <cstdint>

namespace di {

enum class Fp8ActDtype : uint8_t { kBf16, kF32 };  // activation input dtype
enum class Fp8OutDtype : uint8_t { kBf16, kF32 };  // GEMM output dtype

// act_quant on its own: q[m, k] = e4m3_rne(clamp(x / s, +-448)), s = 2^ceil(log2(fp32(
// max(amax, 1e-4) * fp32(1/448)))) per row per `block` columns. The scales are UE8M0 bytes
// (s = 2^(byte - 127)), row-major [m, ceil(k / block)]: the layout the fused RMSNorm + act_quant
// producer (kernels/params/dense_ops.h) writes, so either producer can feed the GEMM.
struct Fp8ActQuantParams {
  const void* x = nullptr;  // [m, k] bf16 bits or fp32 (x_dtype), row-major, row stride k
  Fp8ActDtype x_dtype = Fp8ActDtype::kBf16;
  int64_t m = 0;
  int64_t k = 0;             // multiple of 16
  int block = 32;            // 32 or 128
  uint8_t* q = nullptr;      // [m, k] e4m3fn codes, row-major
  uint8_t* scale = nullptr;  // [m, ceil(k / block)] ue8m0 bytes, row-major
};

// The GEMM. Either x is given and the launcher quantises it into `workspace`
// (fp8_gemm_workspace_bytes(m, k, block)) before the tensor-core kernel, or the producer already
// quantised it (xq + xq_scale, e.g. the fused RMSNorm + act_quant) and only the GEMM runs. It
// never allocates and never synchronizes.
struct Fp8GemmParams {
  const void* x = nullptr;  // [m, k] bf16 bits or fp32 (x_dtype), row-major; or nullptr if xq
  Fp8ActDtype x_dtype = Fp8ActDtype::kBf16;
  const uint8_t* xq = nullptr;            // [m, k] e4m3fn codes (16-byte aligned), instead of x
  const uint8_t* xq_scale = nullptr;      // [m, ceil(k / block)] ue8m0 bytes, with xq
  const uint8_t* weight = nullptr;        // [n, k] e4m3fn codes, row-major, 16-byte aligned
  const uint8_t* weight_scale = nullptr;  // [ceil(n / block), ceil(k / block)] ue8m0 bytes
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;        // multiple of 16 (bulk-copy row stride)
  int block = 32;       // weight block B x B and activation block B: 32 (V4.1) or 128 (V4)
  void* out = nullptr;  // [m, n] bf16 bits or fp32 (out_dtype), row-major
  Fp8OutDtype out_dtype = Fp8OutDtype::kBf16;
  void* workspace = nullptr;   // 256-byte aligned device memory for the quantised activations
  size_t workspace_bytes = 0;  // (neither is needed with xq)
};

}  // namespace di
