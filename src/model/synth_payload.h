#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "model/weight_catalogue.h"

namespace di {

// xoshiro256** seeded through splitmix64: small, fast, and fully specified (reproducible).
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)
  double normal();   // standard normal (Box-Muller)

 private:
  std::array<uint64_t, 4> s_{};
};

uint64_t fnv1a64(std::string_view s);

// 65536-entry sample tables of the value distributions used for synthetic weights, built once
// per synthesis run (shared by all tensors of that run; not global state).
class SynthTables {
 public:
  SynthTables();
  // Byte tables.
  const std::vector<uint8_t>& fp8_weight() const { return fp8_weight_; }  // e4m3 codes
  const std::vector<uint8_t>& fp4_pair() const { return fp4_pair_; }      // two e2m1 nibbles
  // E8M0 exponent bytes centred at `center` (never 0xFF).
  const std::vector<uint8_t>& e8m0(uint8_t center);
  // bf16 / f32 samples of N(mean, std).
  const std::vector<uint16_t>& bf16(float mean, float std);
  const std::vector<float>& f32(float mean, float std);

 private:
  std::vector<uint8_t> fp8_weight_;
  std::vector<uint8_t> fp4_pair_;
  std::map<uint8_t, std::vector<uint8_t>> e8m0_;
  std::map<std::pair<float, float>, std::vector<uint16_t>> bf16_;
  std::map<std::pair<float, float>, std::vector<float>> f32_;
};

// Produces the payload bytes of one tensor, in order, in chunks.
class PayloadGenerator {
 public:
  // `n_experts`: routed experts of the tensor's block (for tid2eid tables).
  PayloadGenerator(const WeightSpec& spec, uint64_t run_seed, SynthTables& tables,
                   int64_t n_experts = 0);
  // Fills `out` with the next bytes; chunk sizes must be multiples of the element size.
  void fill(std::span<std::byte> out);

 private:
  enum class Kind { kByteTable, kBf16, kF32, kTid2eid };
  Kind kind_ = Kind::kByteTable;
  const std::vector<uint8_t>* bytes_ = nullptr;
  const std::vector<uint16_t>* halves_ = nullptr;
  const std::vector<float>* floats_ = nullptr;
  Xoshiro256 rng_;
  int64_t row_len_ = 0;
  int64_t n_experts_ = 0;
  uint64_t element_ = 0;
  std::vector<int64_t> row_;
};

}  // namespace di
