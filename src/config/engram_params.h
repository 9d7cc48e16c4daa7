#pragma once

#include <cstdint>
#include <vector>

namespace di {

struct ModelConfig;

// Hash-space parameters of the Engram tables that follow from the config alone (delta spec §2.3):
// primes[layer][order][head] are the consecutive primes above engram_vocab_size - 1, assigned in
// the order layer -> n-gram order (2..max) -> head; offsets[layer][order*heads + head] are the
// exclusive prefix sums of each layer's primes in that column order. Each layer's table has
// sum(primes[layer]) rows.
struct EngramHashSpace {
  std::vector<std::vector<std::vector<int64_t>>> primes;
  std::vector<std::vector<int64_t>> offsets;
  std::vector<int64_t> table_rows;
};

EngramHashSpace derive_engram_hash_space(const ModelConfig& cfg);
bool is_prime_u64(uint64_t n);

}  // namespace di
