# CUDA 13 for Hopper (sm_90a: wgmma/TMA). CMake 3.25 does not pass -std=c++20 to nvcc 13.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90a)
endif()
if(NOT CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# CMake 3.25 knows no C++20 dialect flag for nvcc 13 and fails at generation ("requires the
# language dialect CUDA20"; CUDA targets inherit CXX_STANDARD 20). Teach it the flag.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# fmt 9 turns its constexpr support off under nvcc (__NVCC__), which leaves constexpr functions
# calling non-constexpr ones: any .cu including common/check.h fails to compile. nvcc 13 handles
# fmt's constexpr code, so turn it back on (this also keeps the format-string checks).
add_compile_definitions($<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)
string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr -lineinfo")
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
add_compile_definitions(DI_WITH_CUDA=1)
