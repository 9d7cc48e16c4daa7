#include "kv_cache/kv_cache_planner.h"

namespace di {

bool KvCachePlanner::try_reserve(SeqId seq, int64_t new_total_tokens) {
  const int64_t need = cache_.pages_needed(seq, new_total_tokens);
  if (need > free_pages_) return false;
  free_pages_ -= need;
  if (need > 0) reserved_.emplace_back(seq, need);
  return true;
}

void KvCachePlanner::release(SeqId seq) {
  free_pages_ += cache_.pages_held(seq);
  for (auto it = reserved_.begin(); it != reserved_.end(); ++it) {
    if (it->first == seq) {
      free_pages_ += it->second;
      reserved_.erase(it);
      break;
    }
  }
}

}  // namespace di
