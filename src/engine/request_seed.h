#pragma once

#include <cstdint>

namespace di {

// The seed of a request that has none: a SplitMix64 mix of the engine seed and the request's
// arrival index, so a whole run is reproducible and requests get unrelated noise.
inline uint64_t derive_request_seed(uint64_t engine_seed, int64_t request_index) {
  uint64_t z = engine_seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(request_index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace di
