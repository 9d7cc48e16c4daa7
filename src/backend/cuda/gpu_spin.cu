#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gpu_spin.h"
#include "common/check.h"

namespace di {
namespace {

__global__ void spin_kernel(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // namespace

void gpu_spin(double microseconds, cudaStream_t stream) {
  DI_CHECK(microseconds >= 0 && microseconds < 1e9, "gpu_spin: {} us", microseconds);
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds * 1e3));
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
