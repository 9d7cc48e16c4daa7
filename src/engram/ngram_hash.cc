#include "engram/ngram_hash.h"

#include <algorithm>

#include "common/check.h"
#include "engram/token_map.h"

namespace di {
namespace {

// Validates the whole chunk up front so that a bad id throws before `history` is touched.
void check_chunk(const EngramHashParams& params, const CompressedTokenMap& token_map,
                 std::span<const int64_t> token_ids, std::span<const uint8_t> dead) {
  DI_CHECK(params.max_ngram >= 2 && params.max_ngram <= kEngramMaxNgramLimit,
           "engram hash: max_ngram {} is outside [2, {}]", params.max_ngram, kEngramMaxNgramLimit);
  DI_CHECK(dead.empty() || dead.size() == token_ids.size(),
           "engram hash: dead mask has {} entries for {} tokens", dead.size(), token_ids.size());
  for (int64_t id : token_ids)
    token_map.lookup(id);
}

// The compressed id a new position contributes to the history.
int32_t compressed_or_dead(const CompressedTokenMap& token_map, std::span<const int64_t> token_ids,
                           std::span<const uint8_t> dead, size_t t) {
  if (!dead.empty() && dead[t] != 0) return EngramHistory::kDead;
  return static_cast<int32_t>(token_map.lookup(token_ids[t]));
}

void push(EngramHistory& history, int32_t newest) {
  std::copy_backward(history.recent.begin(), history.recent.end() - 1, history.recent.end());
  history.recent[0] = newest;
  ++history.num_tokens;
}

}  // namespace

void engram_hash_chunk(const EngramHashParams& params, const CompressedTokenMap& token_map,
                       std::span<const int64_t> token_ids, std::span<const uint8_t> dead,
                       EngramHistory& history, std::span<int64_t> out) {
  check_chunk(params, token_map, token_ids, dead);
  const auto per_token = static_cast<size_t>(params.num_layers() * params.columns);
  DI_CHECK(out.size() == token_ids.size() * per_token,
           "engram hash: output has {} entries, expected {} tokens x {} layers x {} columns",
           out.size(), token_ids.size(), params.num_layers(), params.columns);
  const auto window = static_cast<size_t>(params.max_ngram);

  std::array<uint64_t, kEngramMaxNgramLimit> tokens{};
  for (size_t t = 0; t < token_ids.size(); ++t) {
    const int32_t current = compressed_or_dead(token_map, token_ids, dead, t);
    // Slot k looks back k positions; once one slot is blocked every older one is too, so an
    // n-gram never reaches across the sequence start or an image span.
    bool blocked = false;
    for (size_t k = 0; k < window; ++k) {
      const int32_t source = k == 0 ? current : history.recent[k - 1];
      blocked = blocked || source == EngramHistory::kDead;
      tokens[k] = static_cast<uint64_t>(blocked ? params.pad_compressed_id : source);
    }

    int64_t* row = out.data() + t * per_token;
    for (int64_t layer = 0; layer < params.num_layers(); ++layer) {
      // Compressed ids and multipliers are non-negative and bounded so that the products fit in
      // int64 (the multiplier bound is derived from the compressed vocab size); unsigned math
      // gives the same bits and leaves no room for signed-overflow UB.
      uint64_t rolling = tokens[0] * static_cast<uint64_t>(params.multiplier(layer, 0));
      for (int64_t order = 1; order < params.max_ngram; ++order) {
        rolling ^= tokens[static_cast<size_t>(order)] *
                   static_cast<uint64_t>(params.multiplier(layer, order));
        for (int64_t head = 0; head < params.n_heads; ++head) {
          const int64_t col = (order - 1) * params.n_heads + head;
          const auto prime = static_cast<uint64_t>(params.prime(layer, col));
          row[layer * params.columns + col] =
              static_cast<int64_t>(rolling % prime) + params.offset(layer, col);
        }
      }
    }
    push(history, current);
  }
}

std::vector<int64_t> engram_hash_chunk(const EngramHashParams& params,
                                       const CompressedTokenMap& token_map,
                                       std::span<const int64_t> token_ids,
                                       std::span<const uint8_t> dead, EngramHistory& history) {
  std::vector<int64_t> out(token_ids.size() * static_cast<size_t>(params.num_layers()) *
                           static_cast<size_t>(params.columns));
  engram_hash_chunk(params, token_map, token_ids, dead, history, out);
  return out;
}

void engram_advance_history(const EngramHashParams& params, const CompressedTokenMap& token_map,
                            std::span<const int64_t> token_ids, std::span<const uint8_t> dead,
                            EngramHistory& history) {
  check_chunk(params, token_map, token_ids, dead);
  for (size_t t = 0; t < token_ids.size(); ++t) {
    push(history, compressed_or_dead(token_map, token_ids, dead, t));
  }
}

}  // namespace di
