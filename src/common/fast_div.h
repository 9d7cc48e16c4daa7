#pragma once

// Division of non-negative 31-bit integers by a divisor fixed at launch time, as one widening
// multiply and a shift (Granlund & Montgomery, "Division by invariant integers using
// multiplication", 1994, theorem 4.2 with N = 31): for 2^(l-1) < d <= 2^l and
// m = ceil(2^(31+l) / d) < 2^32, floor(n * m / 2^(31+l)) == floor(n / d) for 0 <= n < 2^31.
// Built on the host, used in kernels whose divisor (e.g. the entries of a cache page) is a
// runtime value; checked exhaustively over small divisors and at the extremes in a unit test.

#include <cstdint>

#include "common/host_device.h"

namespace di {

struct FastDivU31 {
  uint32_t divisor = 1;
  uint32_t multiplier = 0x80000000u;  // m for d = 1: 2^31
  uint32_t shift = 31;                // 31 + l

  FastDivU31() = default;
  // d in [1, 2^31).
  explicit FastDivU31(uint32_t d) : divisor(d) {
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d)
      ++l;
    shift = 31 + l;
    multiplier = static_cast<uint32_t>(((uint64_t{1} << shift) + d - 1) / d);
  }

  // floor(n / divisor) for 0 <= n < 2^31.
  DI_HOST_DEVICE uint32_t div(uint32_t n) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> shift);
  }
};

}  // namespace di
