#pragma once

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator of Random123, cuRAND and PyTorch, and the keyed noise function the
// samplers draw from. Header-only plain C++ (no std:: containers, no libm) so the CUDA sampler can
// include it and produce the same bits: every value here is integer arithmetic or an exact
// floating-point operation.
//
// Noise keying (docs/design/sampling.md): the uniform for vocabulary lane `lane` of the token at
// absolute position `position` of a request with seed `seed`, in noise stream `stream`, is
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (lane / 4, position low 32 bits, position high 32 bits, stream)
//   u       = (philox4x32_10(counter, key)[lane % 4] + 0.5) * 2^-32      in (0, 1), never 0 or 1
// so it is a pure function of (seed, stream, position, lane): no generator state is consumed, and
// the draw of one request cannot depend on which other requests share the batch or on their order.

#include <cstdint>

#include "common/host_device.h"

namespace di {

struct Philox4x32Counter {
  uint32_t v[4];
};
struct Philox4x32Key {
  uint32_t v[2];
};

namespace philox_detail {

inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

DI_HOST_DEVICE constexpr Philox4x32Counter philox_round(Philox4x32Counter c, Philox4x32Key k) {
  const uint64_t p0 = static_cast<uint64_t>(kMul0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kMul1) * c.v[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32);
  const auto lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32);
  const auto lo1 = static_cast<uint32_t>(p1);
  return Philox4x32Counter{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}

}  // namespace philox_detail

// The Philox4x32 bijection with `Rounds` rounds (10 is the standard, crush-resistant choice; 7 is
// only here so the known-answer tests can pin the key schedule).
template <int Rounds = 10>
DI_HOST_DEVICE constexpr Philox4x32Counter philox4x32(Philox4x32Counter ctr, Philox4x32Key key) {
  for (int r = 0; r < Rounds; ++r) {
    if (r > 0) {
      key.v[0] += philox_detail::kWeyl0;
      key.v[1] += philox_detail::kWeyl1;
    }
    ctr = philox_detail::philox_round(ctr, key);
  }
  return ctr;
}

// Independent noise streams of one request. Draft noise, acceptance uniforms and residual noise
// must never share values with the target's sampling noise (vLLM learned this the hard way: keying
// them to one Philox offset biased outputs toward drafted tokens).
enum class NoiseStream : uint32_t {
  kSample = 0,      // the exponential race of the sampler
  kDraft = 1,       // probabilistic drafting
  kAcceptance = 2,  // rejection-sampling acceptance uniforms
  kResidual = 3,    // resampling from the residual distribution
};

DI_HOST_DEVICE constexpr Philox4x32Key noise_key(uint64_t seed) {
  return Philox4x32Key{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
}

// The Philox counter of the 4-lane group holding `lane`.
DI_HOST_DEVICE constexpr Philox4x32Counter noise_counter(NoiseStream stream, uint64_t position,
                                                         uint64_t lane) {
  return Philox4x32Counter{{static_cast<uint32_t>(lane >> 2), static_cast<uint32_t>(position),
                            static_cast<uint32_t>(position >> 32), static_cast<uint32_t>(stream)}};
}

// The 32 random bits of one lane. Lanes 4g..4g+3 share one Philox call; vectorised callers should
// call philox4x32 once per group and use all four words.
DI_HOST_DEVICE constexpr uint32_t noise_bits(uint64_t seed, NoiseStream stream, uint64_t position,
                                             uint64_t lane) {
  return philox4x32(noise_counter(stream, position, lane), noise_key(seed)).v[lane & 3];
}

// Maps 32 random bits to the midpoint of one of 2^32 equal cells of (0, 1): exact in double, so
// host and device agree bit for bit, and never 0 or 1 (min 2^-33, max 1 - 2^-33), so -log(u) is
// finite and positive.
DI_HOST_DEVICE constexpr double uniform_from_bits(uint32_t bits) {
  return (static_cast<double>(bits) + 0.5) * (1.0 / 4294967296.0);
}

// u(seed, stream, position, lane) in (0, 1).
DI_HOST_DEVICE constexpr double noise_uniform(uint64_t seed, NoiseStream stream, uint64_t position,
                                              uint64_t lane) {
  return uniform_from_bits(noise_bits(seed, stream, position, lane));
}

}  // namespace di
