#include "engram/numpy_random.h"

#include "common/check.h"

namespace di {
namespace {

// GCC/Clang extension; the PCG64 LCG is defined on 128-bit integers. `__extension__` keeps
// -Wpedantic quiet about the non-standard type.
__extension__ typedef unsigned __int128 U128;

// SeedSequence hashing constants (numpy/random/bit_generator.pyx, from Melissa O'Neill's
// seed_seq_fe design). All arithmetic is on uint32 and wraps.
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;  // half of a 32-bit word
constexpr size_t kPoolSize = 4;

// The default PCG 128-bit LCG multiplier (pcg_variants.h PCG_DEFAULT_MULTIPLIER_128).
constexpr U128 kPcgMultiplier =
    (static_cast<U128>(2549297995355413924ull) << 64) | static_cast<U128>(4865540595714422341ull);

// Hashes one word with a running constant that advances on every call, so equal inputs at
// different pool slots hash differently.
uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// numpy coerces a Python int seed to little-endian 32-bit words; zero is one word, not none.
std::vector<uint32_t> seed_words(uint64_t seed) {
  std::vector<uint32_t> words;
  do {
    words.push_back(static_cast<uint32_t>(seed & 0xffffffffu));
    seed >>= 32;
  } while (seed != 0);
  return words;
}

}  // namespace

NumpySeedSequence::NumpySeedSequence(uint64_t seed) {
  const std::vector<uint32_t> entropy = seed_words(seed);
  uint32_t hash_const = kInitA;
  for (size_t i = 0; i < kPoolSize; ++i) {
    pool_[i] = hashmix(i < entropy.size() ? entropy[i] : 0u, hash_const);
  }
  for (size_t src = 0; src < kPoolSize; ++src) {
    for (size_t dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src], hash_const));
    }
  }
  // Entropy beyond the pool size is folded in afterwards (never reached for a 64-bit seed, kept
  // so the class stays a faithful SeedSequence).
  for (size_t src = kPoolSize; src < entropy.size(); ++src) {
    for (size_t dst = 0; dst < kPoolSize; ++dst) {
      pool_[dst] = mix(pool_[dst], hashmix(entropy[src], hash_const));
    }
  }
}

std::vector<uint64_t> NumpySeedSequence::generate_state_u64(size_t n_words) const {
  std::vector<uint64_t> out(n_words, 0);
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < 2 * n_words; ++i) {
    uint32_t value = pool_[i % kPoolSize];
    value ^= hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    value ^= value >> kXShift;
    // numpy views the uint32 array as uint64 on a little-endian host: even words are low halves.
    out[i / 2] |= static_cast<uint64_t>(value) << (32 * (i % 2));
  }
  return out;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  const std::vector<uint64_t> words = NumpySeedSequence(seed).generate_state_u64(4);
  // numpy passes words 0,1 as the (high, low) halves of the initial state and words 2,3 as those
  // of the stream selector; pcg_setseq_128_srandom then forces the increment odd.
  const U128 init_state = (static_cast<U128>(words[0]) << 64) | words[1];
  const U128 init_seq = (static_cast<U128>(words[2]) << 64) | words[3];
  const U128 inc = (init_seq << 1) | 1u;
  inc_hi_ = static_cast<uint64_t>(inc >> 64);
  inc_lo_ = static_cast<uint64_t>(inc);
  state_hi_ = 0;
  state_lo_ = 0;
  step();
  U128 s = ((static_cast<U128>(state_hi_) << 64) | state_lo_) + init_state;
  state_hi_ = static_cast<uint64_t>(s >> 64);
  state_lo_ = static_cast<uint64_t>(s);
  step();
}

void NumpyPcg64::step() {
  const U128 s = (static_cast<U128>(state_hi_) << 64) | state_lo_;
  const U128 inc = (static_cast<U128>(inc_hi_) << 64) | inc_lo_;
  const U128 next = s * kPcgMultiplier + inc;
  state_hi_ = static_cast<uint64_t>(next >> 64);
  state_lo_ = static_cast<uint64_t>(next);
}

uint64_t NumpyPcg64::next_uint64() {
  // Advance first, then output from the new state (XSL-RR: xor the halves, rotate right by the
  // top 6 bits).
  step();
  const uint64_t folded = state_hi_ ^ state_lo_;
  const unsigned rot = static_cast<unsigned>(state_hi_ >> 58);
  return (folded >> rot) | (folded << ((64u - rot) & 63u));
}

uint32_t NumpyPcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return buffered_uint32_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  buffered_uint32_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next & 0xffffffffu);
}

std::vector<int64_t> numpy_pcg64_integers(uint64_t seed, int64_t low, int64_t high, size_t n) {
  DI_CHECK(low < high, "numpy_pcg64_integers: low ({}) must be below high ({})", low, high);
  NumpyPcg64 gen(seed);
  // numpy works on the closed interval [low, high - 1] and offsets unsigned draws in [0, rng].
  const uint64_t rng = static_cast<uint64_t>(high) - 1u - static_cast<uint64_t>(low);
  const uint64_t off = static_cast<uint64_t>(low);
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t value = 0;
    if (rng == 0) {
      value = 0;
    } else if (rng == 0xffffffffull) {
      value = gen.next_uint32();
    } else if (rng < 0xffffffffull) {
      // Ranges that fit in 32 bits use Lemire's method on 32-bit draws (which consume half of a
      // buffered 64-bit output each).
      const uint32_t rng_excl = static_cast<uint32_t>(rng) + 1u;
      uint64_t m = static_cast<uint64_t>(gen.next_uint32()) * rng_excl;
      uint32_t leftover = static_cast<uint32_t>(m);
      if (leftover < rng_excl) {
        const uint32_t threshold = static_cast<uint32_t>((0xffffffffull - rng) % rng_excl);
        while (leftover < threshold) {
          m = static_cast<uint64_t>(gen.next_uint32()) * rng_excl;
          leftover = static_cast<uint32_t>(m);
        }
      }
      value = m >> 32;
    } else if (rng == ~0ull) {
      value = gen.next_uint64();  // Lemire cannot express a range of 2^64
    } else {
      const uint64_t rng_excl = rng + 1u;
      U128 m = static_cast<U128>(gen.next_uint64()) * rng_excl;
      uint64_t leftover = static_cast<uint64_t>(m);
      if (leftover < rng_excl) {
        const uint64_t threshold = (~0ull - rng) % rng_excl;
        while (leftover < threshold) {
          m = static_cast<U128>(gen.next_uint64()) * rng_excl;
          leftover = static_cast<uint64_t>(m);
        }
      }
      value = static_cast<uint64_t>(m >> 64);
    }
    out[i] = static_cast<int64_t>(off + value);
  }
  return out;
}

}  // namespace di
