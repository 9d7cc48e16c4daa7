#include "kv_cache/kv_cache_manager.h"

#include <algorithm>
#include <limits>

#include "common/check.h"

namespace di {

namespace {

int64_t pages_in_budget(const KvCacheConfig& cfg) {
  DI_CHECK(cfg.page_bytes > 0, "kv cache page_bytes must be positive, got {}", cfg.page_bytes);
  return static_cast<int64_t>(cfg.memory_budget_bytes / static_cast<uint64_t>(cfg.page_bytes));
}

}  // namespace

KvCacheManager::KvCacheManager(const StateBytes& state, const KvCacheConfig& cfg)
    : layout_(state, cfg.page_bytes), pool_(pages_in_budget(cfg)) {}

double KvCacheManager::usage() const {
  if (total_pages() == 0) return 0.0;
  return static_cast<double>(used_pages()) / static_cast<double>(total_pages());
}

const KvCacheManager::Sequence& KvCacheManager::find(SeqId seq) const {
  const auto it = seqs_.find(seq);
  DI_CHECK(it != seqs_.end(), "kv cache has no sequence {}", seq);
  return it->second;
}

int64_t KvCacheManager::num_tokens(SeqId seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.tokens;
}

int64_t KvCacheManager::pages_held(SeqId seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.pages;
}

int64_t KvCacheManager::pages_needed(SeqId seq, int64_t new_total_tokens) const {
  DI_CHECK(new_total_tokens >= 0, "negative token count {} for sequence {}", new_total_tokens, seq);
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return layout_.pages_for_tokens(new_total_tokens);
  const Sequence& s = it->second;
  if (new_total_tokens <= s.capacity_tokens) return 0;
  const auto& tables = layout_.tables();
  int64_t n = 0;
  for (size_t i = StateLayout::kFirstOwnerTable; i < tables.size(); ++i)
    n += tables[i].pages(new_total_tokens) - static_cast<int64_t>(s.tables[i].size());
  return n;
}

int64_t KvCacheManager::max_tokens_that_fit_alone() const {
  const int64_t total = total_pages();
  if (layout_.pages_for_tokens(0) > total) return -1;
  // pages_for_tokens is non-decreasing: find a length that does not fit, then bisect.
  constexpr int64_t kLimit = int64_t{1} << 52;
  int64_t lo = 0;  // fits
  int64_t hi = 1;
  while (layout_.pages_for_tokens(hi) <= total) {
    lo = hi;
    if (hi >= kLimit) return std::numeric_limits<int64_t>::max();
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (layout_.pages_for_tokens(mid) <= total ? lo : hi) = mid;
  }
  return lo;
}

int64_t KvCacheManager::capacity_tokens(const Sequence& s) const {
  int64_t cap = std::numeric_limits<int64_t>::max();
  const auto& tables = layout_.tables();
  for (size_t i = StateLayout::kFirstOwnerTable; i < tables.size(); ++i) {
    const StateTable& t = tables[i];
    if (t.ratio == 0) continue;  // never grows
    // entries(n) = n / ratio fits in p pages while n / ratio <= p * entries_per_page.
    const auto p = static_cast<int64_t>(s.tables[i].size());
    cap = std::min(cap, (p * t.entries_per_page + 1) * t.ratio - 1);
  }
  return cap;
}

uint64_t KvCacheManager::total_exact_bytes() const {
  uint64_t b = 0;
  for (const auto& [id, s] : seqs_)
    b += layout_.exact_bytes(s.tokens);
  return b;
}

uint64_t KvCacheManager::exact_bytes(SeqId seq) const {
  return layout_.exact_bytes(find(seq).tokens);
}

uint64_t KvCacheManager::allocated_bytes(SeqId seq) const {
  return static_cast<uint64_t>(find(seq).pages) * static_cast<uint64_t>(page_bytes());
}

std::span<const int32_t> KvCacheManager::pages(SeqId seq, StateKind kind, int64_t owner) const {
  const size_t t = layout_.table_index(kind, owner);
  return find(seq).tables[t];
}

void KvCacheManager::allocate(SeqId seq, int64_t new_total_tokens) {
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) {
    Sequence& s = it->second;
    DI_CHECK(new_total_tokens >= s.tokens,
             "kv cache cannot shrink sequence {} from {} to {} tokens", seq, s.tokens,
             new_total_tokens);
    if (new_total_tokens <= s.capacity_tokens) {  // decode fast path: no new page
      s.tokens = new_total_tokens;
      return;
    }
  }
  const int64_t need = pages_needed(seq, new_total_tokens);
  DI_CHECK(need <= free_pages(),
           "kv cache out of pages: sequence {} needs {} more pages for {} tokens, {} of {} free",
           seq, need, new_total_tokens, free_pages(), total_pages());
  const auto& tables = layout_.tables();
  if (it == seqs_.end()) {
    it = seqs_.try_emplace(seq).first;
    it->second.tables.resize(tables.size());
  }
  Sequence& s = it->second;
  for (size_t i = 0; i < tables.size(); ++i) {
    const auto want = static_cast<size_t>(tables[i].pages(new_total_tokens));
    std::vector<int32_t>& table = s.tables[i];
    while (table.size() < want)
      table.push_back(pool_.take());
  }
  s.tokens = new_total_tokens;
  s.pages += need;
  s.capacity_tokens = capacity_tokens(s);
}

void KvCacheManager::free(SeqId seq) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (const std::vector<int32_t>& table : it->second.tables) {
    for (int32_t page : table)
      pool_.release(page);
  }
  seqs_.erase(it);
}

}  // namespace di
