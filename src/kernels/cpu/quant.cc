#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/fp4.h"
#include "common/fp8.h"

namespace di::cpu {
namespace {

template <typename T>
T block_amax(const T* x, size_t n) {
  T a = 0;
  for (size_t i = 0; i < n; ++i)
    a = std::max(a, std::fabs(x[i]));
  return a;
}

// 2^ceil(log2 p) for a positive binary32 p, read from its bits (exponent + 1 if mantissa != 0).
double pow2ceil(float p) {
  return e8m0_to_double(e8m0_pow2ceil(p));
}

template <typename T>
T round_e4m3(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return static_cast<T>(e4m3_to_double(e4m3_from_double(v)));
  } else {
    return e4m3_to_float(e4m3_from_float(v));
  }
}

template <typename T>
T round_e2m1(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return static_cast<T>(e2m1_to_float(e2m1_from_double(v)));
  } else {
    return e2m1_to_float(e2m1_from_float(v));
  }
}

}  // namespace

template <typename T>
void act_quant_e4m3(std::span<T> x, int block) {
  DI_CHECK(block > 0, "act_quant: block must be positive");
  const float c = 1.0f / 448.0f;
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(block)) {
    const size_t n = std::min(static_cast<size_t>(block), x.size() - b);
    T* p = x.data() + b;
    const float a = std::max(static_cast<float>(block_amax(p, n)), 1e-4f);
    const T s = static_cast<T>(pow2ceil(a * c));
    for (size_t i = 0; i < n; ++i) {
      const T v = std::clamp(p[i] / s, T(-448), T(448));
      p[i] = round_e4m3(v) * s;
    }
  }
}

template <typename T>
void fp4_quant_ue8m0(std::span<T> x, int block) {
  DI_CHECK(block > 0, "fp4_quant: block must be positive");
  const float c = 1.0f / 6.0f;
  const float floor_amax = 6.0f * 0x1p-126f;
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(block)) {
    const size_t n = std::min(static_cast<size_t>(block), x.size() - b);
    T* p = x.data() + b;
    const float a = std::max(static_cast<float>(block_amax(p, n)), floor_amax);
    const T s = static_cast<T>(pow2ceil(a * c));
    for (size_t i = 0; i < n; ++i) {
      const T v = std::clamp(p[i] / s, T(-6), T(6));
      p[i] = round_e2m1(v) * s;
    }
  }
}

template <typename T>
void fp4_quant_e4m3(std::span<T> x, int block) {
  DI_CHECK(block > 0, "fp4_quant: block must be positive");
  const float floor_amax = 6.0f * 0x1p-9f;
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(block)) {
    const size_t n = std::min(static_cast<size_t>(block), x.size() - b);
    T* p = x.data() + b;
    const float a = std::max(static_cast<float>(block_amax(p, n)), floor_amax);
    const T s = static_cast<T>(e4m3_to_float(e4m3_from_float(a / 6.0f)));
    for (size_t i = 0; i < n; ++i) {
      const T v = std::clamp(p[i] / s, T(-6), T(6));
      p[i] = round_e2m1(v) * s;
    }
  }
}

template void act_quant_e4m3<float>(std::span<float>, int);
template void act_quant_e4m3<double>(std::span<double>, int);
template void fp4_quant_ue8m0<float>(std::span<float>, int);
template void fp4_quant_ue8m0<double>(std::span<double>, int);
template void fp4_quant_e4m3<float>(std::span<float>, int);
template void fp4_quant_e4m3<double>(std::span<double>, int);

}  // namespace di::cpu
