#include "engram/hash_params.h"

#include <algorithm>
#include <limits>

#include "common/check.h"
#include "config/engram_params.h"
#include "config/model_config.h"
#include "engram/numpy_random.h"
#include "engram/token_map.h"

namespace di {
namespace {

// engram.py seeds each layer's generator with this prime times the layer id.
constexpr uint64_t kLayerSeedFactor = 10007;

}  // namespace

std::vector<int64_t> compute_engram_multipliers(std::span<const int64_t> layer_ids,
                                                int64_t max_ngram, int64_t compressed_vocab_size) {
  DI_CHECK(max_ngram >= 1, "engram multipliers: max_ngram {} must be >= 1", max_ngram);
  DI_CHECK(compressed_vocab_size >= 1, "engram multipliers: compressed vocab size {} must be >= 1",
           compressed_vocab_size);
  const int64_t bound =
      std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
  std::vector<int64_t> out;
  out.reserve(layer_ids.size() * static_cast<size_t>(max_ngram));
  for (int64_t layer_id : layer_ids) {
    DI_CHECK(layer_id >= 0, "engram multipliers: layer id {} must be >= 0", layer_id);
    const std::vector<int64_t> draws =
        numpy_pcg64_integers(kLayerSeedFactor * static_cast<uint64_t>(layer_id), 0, bound,
                             static_cast<size_t>(max_ngram));
    for (int64_t v : draws)
      out.push_back(v * 2 + 1);
  }
  return out;
}

EngramHashParams make_engram_hash_params(const ModelConfig& cfg,
                                         const CompressedTokenMap& token_map) {
  DI_CHECK(!cfg.engram_layer_ids.empty(), "{}: the model has no Engram layers", cfg.source);
  DI_CHECK(cfg.engram_max_ngram_size >= 2 && cfg.engram_max_ngram_size <= kEngramMaxNgramLimit,
           "{}: engram_max_ngram_size {} is outside the supported range [2, {}]", cfg.source,
           cfg.engram_max_ngram_size, kEngramMaxNgramLimit);
  // Every multiplier derives from the compressed vocab size, so a map built for another size
  // would silently rehash the whole table (engram.py asserts the same).
  DI_CHECK(token_map.compressed_vocab_size() == cfg.engram_compressed_vocab_size,
           "{}: token map {} has {} compressed ids but engram_compressed_vocab_size is {}",
           cfg.source, token_map.source(), token_map.compressed_vocab_size(),
           cfg.engram_compressed_vocab_size);

  EngramHashParams p;
  p.layer_ids = cfg.engram_layer_ids;
  p.max_ngram = cfg.engram_max_ngram_size;
  p.n_heads = cfg.engram_n_heads;
  p.columns = cfg.engram_hash_columns();
  p.pad_compressed_id = token_map.lookup(cfg.engram_pad_token_id);
  p.multipliers =
      compute_engram_multipliers(p.layer_ids, p.max_ngram, cfg.engram_compressed_vocab_size);

  const EngramHashSpace space = derive_engram_hash_space(cfg);
  for (size_t layer = 0; layer < space.primes.size(); ++layer) {
    for (const auto& per_order : space.primes[layer]) {
      p.primes.insert(p.primes.end(), per_order.begin(), per_order.end());
    }
    p.offsets.insert(p.offsets.end(), space.offsets[layer].begin(), space.offsets[layer].end());
  }
  DI_CHECK(p.primes.size() == p.offsets.size() &&
               p.primes.size() == static_cast<size_t>(p.num_layers() * p.columns),
           "{}: engram hash space has {} primes and {} offsets, expected {} x {}", cfg.source,
           p.primes.size(), p.offsets.size(), p.num_layers(), p.columns);
  return p;
}

}  // namespace di
