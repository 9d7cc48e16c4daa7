#include "kv_cache/state_layout.h"

#include <algorithm>

#include "common/check.h"

namespace di {

std::string_view state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::kSwaRing:
      return "swa_ring";
    case StateKind::kCompressorTail:
      return "compressor_tail";
    case StateKind::kEngramHistory:
      return "engram_history";
    case StateKind::kCompressedKv:
      return "compressed_kv";
    case StateKind::kIndexKeys:
      return "index_keys";
  }
  return "?";
}

namespace {

StateTable fixed_table(StateKind kind, int64_t entry_bytes, int64_t entries, int64_t page_bytes) {
  StateTable t;
  t.kind = kind;
  t.entry_bytes = entry_bytes;
  t.fixed_entries = entry_bytes > 0 ? entries : 0;
  t.entries_per_page = t.fixed_entries > 0 ? page_bytes / entry_bytes : 0;
  return t;
}

}  // namespace

StateLayout::StateLayout(const StateBytes& s, int64_t page_bytes) : page_bytes_(page_bytes) {
  DI_CHECK(page_bytes > 0, "kv cache page_bytes must be positive, got {}", page_bytes);
  int64_t largest = s.swa_entry_bytes;
  for (const auto& o : s.owners)
    largest = std::max({largest, o.kv_entry_bytes, o.index_entry_bytes});
  DI_CHECK(page_bytes >= largest,
           "kv cache page_bytes {} is smaller than the largest state entry ({} B)", page_bytes,
           largest);
  tables_.push_back(
      fixed_table(StateKind::kSwaRing, s.swa_entry_bytes, s.window * s.swa_blocks, page_bytes));
  tables_.push_back(fixed_table(StateKind::kCompressorTail, 1,
                                static_cast<int64_t>(s.compressor_tail_bytes), page_bytes));
  tables_.push_back(fixed_table(StateKind::kEngramHistory, 1,
                                static_cast<int64_t>(s.engram_history_bytes), page_bytes));
  num_owners_ = static_cast<int64_t>(s.owners.size());
  for (int64_t i = 0; i < num_owners_; ++i) {
    const StateBytes::Owner& o = s.owners[static_cast<size_t>(i)];
    DI_CHECK(o.ratio >= 1, "state owner block {} has compress ratio {}", o.block, o.ratio);
    for (StateKind kind : {StateKind::kCompressedKv, StateKind::kIndexKeys}) {
      StateTable t;
      t.kind = kind;
      t.owner = i;
      t.block = o.block;
      t.ratio = o.ratio;
      t.entry_bytes = kind == StateKind::kCompressedKv ? o.kv_entry_bytes : o.index_entry_bytes;
      // An owner without index keys (V4 HCA) keeps an empty table: ratio 0 and no entries.
      if (t.entry_bytes == 0) t.ratio = 0;
      t.entries_per_page = t.entry_bytes > 0 ? page_bytes / t.entry_bytes : 0;
      tables_.push_back(t);
    }
  }
  for (int64_t i = 0; i < kFirstOwnerTable; ++i)
    fixed_pages_ += tables_[static_cast<size_t>(i)].pages(0);
}

size_t StateLayout::table_index(StateKind kind, int64_t owner) const {
  switch (kind) {
    case StateKind::kSwaRing:
    case StateKind::kCompressorTail:
    case StateKind::kEngramHistory:
      DI_CHECK(owner == 0, "state kind {} has a single table per sequence, asked for owner {}",
               state_kind_name(kind), owner);
      return static_cast<size_t>(kind);
    case StateKind::kCompressedKv:
    case StateKind::kIndexKeys:
      DI_CHECK(owner >= 0 && owner < num_owners_, "state owner {} out of range [0, {})", owner,
               num_owners_);
      return static_cast<size_t>(kFirstOwnerTable + 2 * owner +
                                 (kind == StateKind::kIndexKeys ? 1 : 0));
  }
  DI_FAIL("unknown state kind {}", static_cast<int>(kind));
}

int64_t StateLayout::pages_for_tokens(int64_t tokens) const {
  int64_t n = fixed_pages_;
  for (size_t i = kFirstOwnerTable; i < tables_.size(); ++i)
    n += tables_[i].pages(tokens);
  return n;
}

uint64_t StateLayout::exact_bytes(int64_t tokens) const {
  uint64_t b = 0;
  for (const StateTable& t : tables_)
    b += t.bytes(tokens);
  return b;
}

}  // namespace di
