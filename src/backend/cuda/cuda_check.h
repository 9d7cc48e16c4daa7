#pragma once

#include <cuda_runtime_api.h>

namespace di::detail {

// Throws di::Error naming the CUDA error (name and description), the failing expression and
// file:line.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace di::detail

// DI_CUDA_CHECK(cudaMalloc(...)): throws di::Error when the CUDA runtime call does not return
// cudaSuccess.
#define DI_CUDA_CHECK(expr)                                                    \
  do {                                                                         \
    const cudaError_t di_cuda_err_ = (expr);                                   \
    if (di_cuda_err_ != cudaSuccess) [[unlikely]] {                            \
      ::di::detail::throw_cuda_error(di_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)
