#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace di {

// Bit-exact re-implementations of the pieces of numpy's random module that the Engram hash
// multipliers depend on (engram.py draws them with `np.random.default_rng(seed).integers(...)`).
// Any deviation here would silently rehash the whole Engram table, so every step follows numpy's
// documented algorithms exactly: SeedSequence entropy pooling, PCG64 (XSL-RR 128/64) and the
// Lemire bounded-integer sampler behind Generator.integers.

// numpy.random.SeedSequence(seed) for a non-negative integer seed (no spawn key, pool size 4):
// the mixed entropy pool, and generate_state(n, uint64) drawn from it.
class NumpySeedSequence {
 public:
  explicit NumpySeedSequence(uint64_t seed);

  const std::array<uint32_t, 4>& pool() const { return pool_; }
  // generate_state(n_words, np.uint64): 2n 32-bit words paired little-endian into n words.
  std::vector<uint64_t> generate_state_u64(size_t n_words) const;

 private:
  std::array<uint32_t, 4> pool_{};
};

// numpy's PCG64 bit generator, including its one-word buffer that splits a 64-bit draw into two
// 32-bit ones (numpy's next_uint32 for PCG64 returns the low half first, then the high half).
class NumpyPcg64 {
 public:
  // np.random.PCG64(SeedSequence(seed)): state/increment from generate_state(4, uint64).
  explicit NumpyPcg64(uint64_t seed);

  uint64_t next_uint64();
  uint32_t next_uint32();

  // The 128-bit LCG state and increment as (high, low) words, as numpy's bit_generator.state
  // reports them (for tests).
  std::array<uint64_t, 2> state() const { return {state_hi_, state_lo_}; }
  std::array<uint64_t, 2> increment() const { return {inc_hi_, inc_lo_}; }

 private:
  void step();

  uint64_t state_hi_ = 0;
  uint64_t state_lo_ = 0;
  uint64_t inc_hi_ = 0;
  uint64_t inc_lo_ = 0;
  bool has_uint32_ = false;
  uint32_t buffered_uint32_ = 0;
};

// np.random.default_rng(seed).integers(low, high, size=n, dtype=np.int64): n values in
// [low, high). Requires low < high.
std::vector<int64_t> numpy_pcg64_integers(uint64_t seed, int64_t low, int64_t high, size_t n);

}  // namespace di
