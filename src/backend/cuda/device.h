#pragma once

#include <cstddef>
#include <string>

namespace di {

struct DeviceInfo {
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  size_t total_mem = 0;  // bytes
  int sm_count = 0;
};

// Number of CUDA devices; 0 when there is no driver or no device. Never throws.
int cuda_device_count() noexcept;

// Properties of device `ordinal` (must be in [0, cuda_device_count())).
DeviceInfo device_info(int ordinal);

// SMs of the calling thread's current device (cudaGetDevice): the launchers' grid-size choices.
int current_sm_count();

// Compute capability major of the calling thread's current device (9: Hopper): the launchers'
// per-architecture kernel choices.
int current_sm_major();

}  // namespace di
