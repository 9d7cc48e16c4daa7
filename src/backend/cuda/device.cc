#include "backend/cuda/device.h"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace di {

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver / no device: clear the error so later calls do not report it.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

DeviceInfo device_info(int ordinal) {
  const int count = cuda_device_count();
  DI_CHECK(ordinal >= 0 && ordinal < count, "CUDA device {} does not exist ({} devices)", ordinal,
           count);
  cudaDeviceProp prop{};
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.total_mem = prop.totalGlobalMem;
  info.sm_count = prop.multiProcessorCount;
  return info;
}

namespace {

// An attribute of the calling thread's current device.
int current_device_attribute(cudaDeviceAttr attr) {
  int device = 0, value = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

}  // namespace

int current_sm_count() {
  return current_device_attribute(cudaDevAttrMultiProcessorCount);
}

int current_sm_major() {
  return current_device_attribute(cudaDevAttrComputeCapabilityMajor);
}

}  // namespace di
