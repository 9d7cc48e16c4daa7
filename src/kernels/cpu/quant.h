#pragma once

// Quantisation simulations of the reference (delta spec §3.2, fixture README §5.1): each block
// of x is replaced in place by its quantised value q * s. The scale arithmetic is binary32 (as
// in the real kernels) whatever T is; the element rounding is decided on the T value, ties to
// even. T = float (fp32 precision) or double (fp64 validation precision).

#include <cstdint>
#include <span>
#include <type_traits>

#include "common/bf16.h"

namespace di::cpu {

// FP8 e4m3 with a UE8M0 (power-of-two) scale per `block` elements:
// a = max(fp32(amax), fp32(1e-4)); s = 2^ceil(log2(fp32(a * fp32(1/448))));
// q = e4m3_rne(clamp(x / s, +-448)). Used before every FP8/FP4 GEMM and on window KV.
template <typename T>
void act_quant_e4m3(std::span<T> x, int block);

// FP4 e2m1 with a UE8M0 scale per `block` (32) elements: a = max(fp32(amax), 6 * 2^-126);
// s = 2^ceil(log2(fp32(a * fp32(1/6)))); q = e2m1_rne(clamp(x / s, +-6)). Indexer q and keys.
template <typename T>
void fp4_quant_ue8m0(std::span<T> x, int block);

// FP4 e2m1 with an E4M3 scale per `block` (16) elements: a = max(fp32(amax), 6 * 2^-9);
// s = e4m3_rne(fp32(a / 6)); q = e2m1_rne(clamp(x / s, +-6)) (x / s one rounded T division).
// Compressed KV.
template <typename T>
void fp4_quant_e4m3(std::span<T> x, int block);

// v rounded to bf16 (nearest, ties to even; a double rounded once): where the reference, run in
// its default dtype bf16, stores a value as bf16 (the bf16 precision of the CPU forward).
template <typename T>
inline T round_bf16(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return static_cast<T>(bf16_to_float(bf16_from_double(v)));
  } else {
    return bf16_to_float(bf16_from_float(v));
  }
}

// Each value rounded to bf16 in place.
template <typename T>
void round_bf16(std::span<T> x) {
  for (T& v : x)
    v = round_bf16(v);
}

}  // namespace di::cpu
