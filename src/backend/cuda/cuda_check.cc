#include "backend/cuda/cuda_check.h"

#include "common/check.h"

namespace di::detail {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw_check_failure(file, line, nullptr,
                      fmt::format("CUDA error {} ({}) in {}", cudaGetErrorName(err),
                                  cudaGetErrorString(err), expr));
}

}  // namespace di::detail
