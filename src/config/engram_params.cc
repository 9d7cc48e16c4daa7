#include "config/engram_params.h"

#include "common/check.h"
#include "config/model_config.h"

namespace di {

bool is_prime_u64(uint64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  if (n % 3 == 0) return n == 3;
  for (uint64_t d = 5; d * d <= n; d += 6) {
    if (n % d == 0 || n % (d + 2) == 0) return false;
  }
  return true;
}

EngramHashSpace derive_engram_hash_space(const ModelConfig& cfg) {
  EngramHashSpace hs;
  const int64_t orders = cfg.engram_max_ngram_size - 1;
  const int64_t heads = cfg.engram_n_heads;
  DI_CHECK(orders >= 1 && heads >= 1 && cfg.engram_vocab_size >= 2,
           "engram hash space needs max_ngram_size >= 2, n_heads >= 1, vocab_size >= 2");
  // Primes are strictly increasing over the whole walk, so "not yet used" reduces to "greater
  // than the last one taken".
  uint64_t candidate = static_cast<uint64_t>(cfg.engram_vocab_size - 1);
  for (size_t layer = 0; layer < cfg.engram_layer_ids.size(); ++layer) {
    auto& lp = hs.primes.emplace_back();
    auto& lo = hs.offsets.emplace_back();
    int64_t running = 0;
    for (int64_t o = 0; o < orders; ++o) {
      auto& op = lp.emplace_back();
      for (int64_t h = 0; h < heads; ++h) {
        do {
          ++candidate;
        } while (!is_prime_u64(candidate));
        op.push_back(static_cast<int64_t>(candidate));
        lo.push_back(running);
        running += static_cast<int64_t>(candidate);
      }
    }
    hs.table_rows.push_back(running);
  }
  return hs;
}

}  // namespace di
