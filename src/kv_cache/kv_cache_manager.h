#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv_cache/page_pool.h"
#include "kv_cache/state_layout.h"
#include "model/model_stats.h"

namespace di {

// Engine-assigned sequence (request) id.
using SeqId = int64_t;

struct KvCacheConfig {
  uint64_t memory_budget_bytes = 0;  // device bytes for per-sequence state (all kinds)
  int64_t page_bytes = 64 * 1024;    // must be >= the largest state entry
};

// The authority for per-sequence state memory (docs/design/kv_cache_and_scheduler.md).
// One unified pool of fixed-size pages (budget / page_bytes of them); every sequence holds one
// block table per state table of StateLayout, each page carrying entries of one kind only.
//
// Contract: const queries plan (the scheduler, through KvCachePlanner), mutating commits
// (allocate/free) are called by the engine thread only. A sequence's tables always hold exactly
// the pages for its token count: table t has StateTable::pages(tokens) pages.
class KvCacheManager {
 public:
  KvCacheManager(const StateBytes& state, const KvCacheConfig& cfg);

  const StateLayout& layout() const { return layout_; }
  int64_t page_bytes() const { return layout_.page_bytes(); }
  int64_t total_pages() const { return pool_.total(); }
  int64_t used_pages() const { return pool_.used(); }
  int64_t free_pages() const { return pool_.free(); }
  double usage() const;  // used / total pages, 0 when the pool is empty

  // ---- queries (const) ----
  bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  size_t num_sequences() const { return seqs_.size(); }
  // Tokens whose state the sequence holds; 0 for an unknown sequence.
  int64_t num_tokens(SeqId seq) const;
  // Pages the sequence holds; 0 for an unknown sequence.
  int64_t pages_held(SeqId seq) const;
  // Additional pages needed to hold `new_total_tokens` tokens (an unknown sequence counts from
  // nothing, fixed tables included; a total below the current one needs 0).
  int64_t pages_needed(SeqId seq, int64_t new_total_tokens) const;
  bool can_fit(SeqId seq, int64_t new_total_tokens) const {
    return pages_needed(seq, new_total_tokens) <= free_pages();
  }
  // Pages a fresh sequence of `tokens` tokens needs.
  int64_t pages_for_tokens(int64_t tokens) const { return layout_.pages_for_tokens(tokens); }
  // The longest sequence whose state fits in the whole (empty) cache; -1 when not even the fixed
  // state of one sequence fits; INT64_MAX when the state does not grow with length.
  int64_t max_tokens_that_fit_alone() const;

  // Exact bytes of the sequence's state (== StateBytes::sequence_bytes(num_tokens(seq))), and
  // the bytes of the pages it holds (>= exact).
  uint64_t exact_bytes(SeqId seq) const;
  uint64_t allocated_bytes(SeqId seq) const;
  uint64_t total_exact_bytes() const;  // O(sequences)
  uint64_t total_allocated_bytes() const {
    return static_cast<uint64_t>(used_pages()) * static_cast<uint64_t>(page_bytes());
  }

  // Block table of one state table of a sequence: page ids in entry order. Entry e of the table
  // lives in page table[e / entries_per_page] at byte (e % entries_per_page) * entry_bytes. The
  // span is invalidated by the next allocate/free. Throws for an unknown sequence.
  std::span<const int32_t> pages(SeqId seq, StateKind kind, int64_t owner = 0) const;

  // ---- commits (engine thread) ----
  // Grows the sequence (creating it if unknown) to hold `new_total_tokens` tokens. Throws
  // di::Error when the pages do not fit (the scheduler must have checked) or when the total is
  // below the current one; nothing changes then.
  void allocate(SeqId seq, int64_t new_total_tokens);
  // Releases every page of the sequence (finish, abort, preemption). Unknown ids are ignored.
  void free(SeqId seq);

 private:
  struct Sequence {
    int64_t tokens = 0;
    int64_t pages = 0;
    // The most tokens the held pages cover: growing within it needs no page (the decode fast
    // path of pages_needed/allocate, free of divisions).
    int64_t capacity_tokens = 0;
    std::vector<std::vector<int32_t>> tables;  // one per StateLayout table
  };
  const Sequence& find(SeqId seq) const;
  int64_t capacity_tokens(const Sequence& s) const;

  StateLayout layout_;
  PagePool pool_;
  std::unordered_map<SeqId, Sequence> seqs_;
};

}  // namespace di
