#pragma once

// Helpers of the dense-op GPU parity tests: random inputs, device copies, poisoned outputs.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "kernels/cuda/ops/rope.cuh"

namespace di::dense_test {

// Skips the test without a CUDA device.
#define DI_REQUIRE_GPU()                                                           \
  do {                                                                             \
    if (::di::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: skipped"; \
  } while (0)

inline std::vector<float> random_normal(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = bf16_from_float(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = bf16_to_float(v[i]);
  return out;
}

// A device copy of a host vector.
template <typename T>
DeviceBuffer upload(const std::vector<T>& v, cudaStream_t stream, const char* tag = "test input") {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16), tag);
  if (!v.empty()) b.copy_from_host_async(v.data(), v.size() * sizeof(T), stream);
  return b;
}

// A device buffer of n elements filled with 0xFF bytes (NaN for fp32/bf16, 0xFF codes).
template <typename T>
DeviceBuffer poisoned(size_t n, cudaStream_t stream, const char* tag = "test output") {
  DeviceBuffer b(std::max<size_t>(n * sizeof(T), 16), tag);
  b.fill_async(0xFF, stream);
  return b;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n, cudaStream_t stream) {
  std::vector<T> v(n);
  b.copy_to_host_async(v.data(), n * sizeof(T), stream);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

// apply_rope on `rows` rows of heads x head_dim activations in place (the tail's forward
// rotation at positions [rows] with freqs [rope_dim / 2]): the separate launch that the kernels
// fusing the RoPE are compared with.
inline void rope_rows(void* x, const int64_t* positions, const float* freqs, int64_t rows,
                      int64_t heads, int64_t head_dim, int64_t rope_dim, ActPrecision precision,
                      cudaStream_t stream) {
  RopeApplyParams p;
  p.x = x;
  p.positions = positions;
  p.freqs = freqs;
  p.rows = rows;
  p.heads = heads;
  p.head_dim = head_dim;
  p.rope_dim = rope_dim;
  p.precision = precision;
  apply_rope(p, stream);
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A [129,280, 5,120] bf16 table of random finite values with magnitudes in [2^-7, 1), shared by
// the embedding and LM head tests (1.3 GB: built once per process).
inline const std::vector<uint16_t>& big_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(size_t{129280} * 5120);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < t.size(); i += 4) {
      s += 0x9E3779B97F4A7C15ull;
      uint64_t z = s;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      for (size_t j = 0; j < 4 && i + j < t.size(); ++j) {
        const auto r = static_cast<uint16_t>(z >> (16 * j));
        // sign | exponent 120..127 | 7 random mantissa bits
        t[i + j] =
            static_cast<uint16_t>((r & 0x8000u) | ((120u + ((r >> 7) & 7u)) << 7) | (r & 0x7Fu));
      }
    }
    return t;
  }();
  return table;
}

}  // namespace di::dense_test
