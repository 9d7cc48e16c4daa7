#pragma once

// Shared-memory limits of sm_90 (H100 / H200) that the kernels' tile choices are checked against.

#include <cstdint>

namespace di::cuda_detail {

inline constexpr int64_t kSm90MaxSmemPerBlock = 227 * 1024;  // dynamic, with the opt-in attribute
inline constexpr int64_t kSm90SmemPerSm = 228 * 1024;
inline constexpr int64_t kSm90SmemReservedPerCta = 1024;  // taken by the runtime per resident CTA

}  // namespace di::cuda_detail
