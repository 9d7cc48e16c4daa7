#pragma once

// DI_HOST_DEVICE marks small header-only helpers (dtype codecs) that must compile both in host
// C++ and in CUDA device code, so CPU references and kernels share one bit-exact definition.
#if defined(__CUDACC__)
#define DI_HOST_DEVICE __host__ __device__
#else
#define DI_HOST_DEVICE
#endif
