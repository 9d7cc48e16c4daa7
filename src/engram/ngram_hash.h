#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engram/hash_params.h"

namespace di {

class CompressedTokenMap;

// The only state Engram hashing carries between chunks of one sequence: the compressed ids of
// the last max_ngram - 1 positions. It is a small trivially copyable value, so a caller
// checkpoints it by copying and rolls back (e.g. after a rejected speculative draft) by assigning
// the copy back; nothing else holds hidden state.
struct EngramHistory {
  // Marks a slot whose position is DEAD (an image-span token) or lies before the sequence start.
  // The reference blocks the look-back identically in both cases, so one marker serves both.
  static constexpr int32_t kDead = -1;
  static constexpr size_t kCapacity = static_cast<size_t>(kEngramMaxNgramLimit - 1);

  // recent[k] = compressed id of position num_tokens - 1 - k (newest first), or kDead.
  std::array<int32_t, kCapacity> recent = {kDead, kDead, kDead, kDead, kDead, kDead, kDead};
  // Tokens consumed so far = position of the next token of the sequence.
  int64_t num_tokens = 0;

  bool operator==(const EngramHistory&) const = default;
};
static_assert(EngramHistory::kCapacity == 7, "update the kDead initialiser of recent");

// Hashes one chunk of a sequence, continuing `history` (the chunk's first token sits at position
// history.num_tokens), and advances `history` past the chunk. Any split of a sequence into chunks
// gives the same ids as hashing it in one piece.
//   token_ids: [T] raw token ids.
//   dead:      [T] (non-zero = image-span token) or empty (no dead tokens). A dead token takes
//              part in no n-gram: look-backs of later tokens stop at it, and its own ids are
//              those of an all-pad n-gram, exactly as in the reference (the Engram gate then
//              ignores them).
//   out:       [T][num_layers][columns] int64 table row ids, offsets included.
// Semantics of engram.py NgramHashState.forward (delta spec §2.4): look-back slot k of position t
// holds c(t - k), or the pad's compressed id once a slot j <= k is before the start or DEAD;
// p_k = c_k * mult[k]; r_i = p_0 ^ ... ^ p_i; column (order i + 1, head h) gets
// r_i % prime + offset. Throws di::Error for a raw id outside the token map or a size mismatch.
void engram_hash_chunk(const EngramHashParams& params, const CompressedTokenMap& token_map,
                       std::span<const int64_t> token_ids, std::span<const uint8_t> dead,
                       EngramHistory& history, std::span<int64_t> out);

// Convenience overload returning a freshly allocated [T][num_layers][columns] array.
std::vector<int64_t> engram_hash_chunk(const EngramHashParams& params,
                                       const CompressedTokenMap& token_map,
                                       std::span<const int64_t> token_ids,
                                       std::span<const uint8_t> dead, EngramHistory& history);

// Advances `history` past `token_ids` without producing ids: rebuilds the state after a
// speculative verify from the checkpoint taken before it plus the accepted tokens.
void engram_advance_history(const EngramHashParams& params, const CompressedTokenMap& token_map,
                            std::span<const int64_t> token_ids, std::span<const uint8_t> dead,
                            EngramHistory& history);

}  // namespace di
