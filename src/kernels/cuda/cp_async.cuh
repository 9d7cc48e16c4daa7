#pragma once

// Asynchronous global -> shared copies (cp.async, sm_80+) shared by the kernels that stream
// through a multi-stage shared-memory ring. Device code only: include from .cu files.

#include <cstdint>

namespace di::cuda_detail {

// 16 bytes, L2 only (.cg); valid = false zero-fills the destination and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem_ptr, const void* gptr, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gptr),
               "r"(src_bytes));
}

// The same with the destination as a shared-memory address (hoisted conversions).
__device__ __forceinline__ void cp_async16(uint32_t smem_addr, const void* gptr, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gptr),
               "r"(src_bytes));
}

// 4 bytes (.ca: cp.async of fewer than 16 bytes must go through L1).
__device__ __forceinline__ void cp_async4(void* smem_ptr, const void* gptr, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gptr),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace di::cuda_detail
