#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/model_stats.h"

namespace di {

// The per-sequence state objects of a model (delta spec §3.1), each stored in its own block
// table of fixed-size pages. One page holds entries of one kind only.
enum class StateKind : uint8_t {
  kSwaRing,         // SWA rings of every block (backbone + draft stages), one table per sequence
  kCompressorTail,  // fp32 partial pooling groups of every pooling owner (byte-addressed)
  kEngramHistory,   // last (max_ngram - 1) compressed token ids (byte-addressed)
  kCompressedKv,    // compressed main KV of one owner: one entry per `ratio` tokens
  kIndexKeys,       // indexer keys of one owner: one entry per `ratio` tokens
};
inline constexpr int kNumStateKinds = 5;
std::string_view state_kind_name(StateKind kind);

// One block table of a sequence: which kind, whose, and how entries map onto pages.
struct StateTable {
  StateKind kind = StateKind::kSwaRing;
  int64_t owner = 0;   // owner index (StateBytes::owners) for growing kinds; 0 otherwise
  int64_t block = -1;  // model block of the owner; -1 for the per-sequence kinds
  int64_t entry_bytes = 0;
  int64_t entries_per_page = 0;  // floor(page_bytes / entry_bytes); 0 when the table is unused
  int64_t fixed_entries = 0;     // fixed kinds: entries whatever the length
  int64_t ratio = 0;             // growing kinds: one entry per `ratio` tokens; 0 for fixed kinds

  int64_t entries(int64_t tokens) const { return ratio > 0 ? tokens / ratio : fixed_entries; }
  int64_t pages(int64_t tokens) const {
    const int64_t e = entries(tokens);
    return e == 0 ? 0 : (e + entries_per_page - 1) / entries_per_page;
  }
  uint64_t bytes(int64_t tokens) const {
    return static_cast<uint64_t>(entries(tokens) * entry_bytes);
  }
};

// The tables of one sequence, derived once from StateBytes and the page size. Table order:
// 0 SWA rings, 1 compressor tails, 2 Engram history, then for owner i: 3 + 2i compressed KV and
// 4 + 2i index keys.
//
// SWA: the rings of all blocks form one table of swa_blocks x window entries (entry b * window +
// (pos mod window) holds block b's slot), so a ring may straddle pages but an entry never does;
// one table per block would waste most of a page per block (a 528 B x 128 ring is 66 KiB).
// Compressor tail and Engram history are byte blobs (entry = 1 byte): their bytes are addressed
// linearly over the table's pages.
class StateLayout {
 public:
  static constexpr int64_t kFirstOwnerTable = 3;

  StateLayout(const StateBytes& state, int64_t page_bytes);

  int64_t page_bytes() const { return page_bytes_; }
  const std::vector<StateTable>& tables() const { return tables_; }
  int64_t num_owners() const { return num_owners_; }
  // Index into tables() of (kind, owner); owner must be 0 for the per-sequence kinds.
  size_t table_index(StateKind kind, int64_t owner) const;

  // Pages of the fixed tables (every sequence holds them from its first allocation).
  int64_t fixed_pages() const { return fixed_pages_; }
  // Pages a fresh sequence of `tokens` tokens holds.
  int64_t pages_for_tokens(int64_t tokens) const;
  // Exact state bytes of a sequence of `tokens` tokens (== StateBytes::sequence_bytes).
  uint64_t exact_bytes(int64_t tokens) const;

 private:
  int64_t page_bytes_ = 0;
  int64_t num_owners_ = 0;
  int64_t fixed_pages_ = 0;
  std::vector<StateTable> tables_;
};

}  // namespace di
