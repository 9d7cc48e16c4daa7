#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kv_cache/kv_cache_manager.h"

namespace di {

// A what-if view of a KvCacheManager for one scheduling decision: it counts free pages locally
// as sequences are (hypothetically) grown and released, never touching the manager. When the
// engine then commits the plan in the documented order (free the released sequences, then
// allocate the reserved ones), every allocate succeeds.
//
// Preconditions (the scheduler's usage): each sequence is reserved at most once per plan, and a
// released sequence is not reserved again in the same plan.
class KvCachePlanner {
 public:
  explicit KvCachePlanner(const KvCacheManager& cache)
      : cache_(cache), free_pages_(cache.free_pages()) {}

  int64_t free_pages() const { return free_pages_; }

  // Reserves the pages to grow `seq` to `new_total_tokens`; false (and nothing reserved) when
  // they do not fit in the pages left in this plan.
  bool try_reserve(SeqId seq, int64_t new_total_tokens);
  // Returns to the plan the pages `seq` holds in the manager plus any reserved for it here.
  void release(SeqId seq);

 private:
  const KvCacheManager& cache_;
  int64_t free_pages_ = 0;
  std::vector<std::pair<SeqId, int64_t>> reserved_;  // (seq, pages) in reservation order
};

}  // namespace di
