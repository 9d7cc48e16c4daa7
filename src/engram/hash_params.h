#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace di {

struct ModelConfig;
class CompressedTokenMap;

// Largest engram_max_ngram_size supported; EngramHistory keeps max_ngram - 1 slots inline so it
// stays a small copyable value (release: 4).
inline constexpr int64_t kEngramMaxNgramLimit = 8;

// The per-layer hash multipliers exactly as engram.py's compute_hash_multipliers derives them
// (delta spec §2.3): bound = max(1, ((2^63 - 1) // compressed_vocab_size) // 2), then
// np.random.default_rng(10007 * layer_id).integers(0, bound, size=max_ngram, dtype=int64) * 2 + 1.
// Odd, and small enough that compressed_id * multiplier cannot overflow int64.
// Returns [layer_ids.size()][max_ngram] flattened row-major.
std::vector<int64_t> compute_engram_multipliers(std::span<const int64_t> layer_ids,
                                                int64_t max_ngram, int64_t compressed_vocab_size);

// Everything the n-gram hash needs besides the token map itself, for all Engram layers.
// Column c of a layer is (order n = c / n_heads + 2, head c % n_heads), matching the reference's
// concatenation order and the layout of the Engram tables.
struct EngramHashParams {
  std::vector<int64_t> layer_ids;  // backbone layer of each Engram layer, in config order
  int64_t max_ngram = 0;           // longest n-gram; look-back covers max_ngram - 1 tokens
  int64_t n_heads = 0;
  int64_t columns = 0;               // (max_ngram - 1) * n_heads hash ids per layer and token
  int64_t pad_compressed_id = 0;     // fills look-back slots before the start or across DEAD
  std::vector<int64_t> multipliers;  // [num_layers][max_ngram]
  std::vector<int64_t> primes;       // [num_layers][columns] bucket modulus of each column
  std::vector<int64_t> offsets;      // [num_layers][columns] first table row of each column

  int64_t num_layers() const { return static_cast<int64_t>(layer_ids.size()); }
  int64_t multiplier(int64_t layer, int64_t k) const {
    return multipliers[static_cast<size_t>(layer * max_ngram + k)];
  }
  int64_t prime(int64_t layer, int64_t column) const {
    return primes[static_cast<size_t>(layer * columns + column)];
  }
  int64_t offset(int64_t layer, int64_t column) const {
    return offsets[static_cast<size_t>(layer * columns + column)];
  }
};

// Builds the parameters from the config (primes/offsets via derive_engram_hash_space, multipliers
// from engram_compressed_vocab_size) and the token map (the pad id is the raw
// engram_pad_token_id mapped through it, as engram.py does). Throws di::Error when the config has
// no Engram layers, max_ngram exceeds kEngramMaxNgramLimit, or the token map's compressed vocab
// size disagrees with the config.
EngramHashParams make_engram_hash_params(const ModelConfig& cfg,
                                         const CompressedTokenMap& token_map);

}  // namespace di
