#pragma once

// Per-sequence decode state of the V4.1 model (delta spec §3.1), explicit and owned by the
// caller: nothing is shared between sequences and nothing lives in globals.

#include <cstdint>
#include <vector>

#include "engram/ngram_hash.h"
#include "model/forward_api.h"

namespace di::v41 {

template <typename T>
struct BlockState {
  std::vector<T> ring;  // [window, head_dim] post-RoPE, FP8-simulated K=V; slot = pos % window
  // kv sources only:
  std::vector<T> comp_kv;     // [n, head_dim] post-RoPE FP4/E4M3-16 entries (grows)
  std::vector<T> index_keys;  // [n, index_head_dim] post-RoPE FP4/UE8M0-32 keys (grows)
  std::vector<T> tail_kv;     // [ratio, head_dim] partial group (ratio > 1), 0 initially
  std::vector<T> tail_score;  // [ratio, head_dim], -inf initially
  int64_t comp_entries = 0;
};

template <typename T>
class SequenceStateT final : public SequenceState {
 public:
  int64_t num_tokens() const override { return tokens; }

  int64_t tokens = 0;
  std::vector<BlockState<T>> blocks;  // backbone layers then draft stages
  EngramHistory engram;
  // Shipped-quirk emulation: the last kv source that published index keys (-1: none yet).
  int64_t last_index_publisher = -1;
  int64_t draft_tokens = 0;  // positions whose main_kv the DSpark rings hold
};

}  // namespace di::v41
