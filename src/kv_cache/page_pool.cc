#include "kv_cache/page_pool.h"

#include <limits>

#include "common/check.h"

namespace di {

PagePool::PagePool(int64_t num_pages) : total_(num_pages) {
  DI_CHECK(num_pages >= 0 && num_pages <= std::numeric_limits<int32_t>::max(),
           "kv cache page count {} out of range (page ids are int32)", num_pages);
  in_use_.assign(static_cast<size_t>(num_pages), 0);
}

int32_t PagePool::take() {
  DI_CHECK(used_ < total_, "kv cache page pool exhausted ({} pages)", total_);
  int32_t page = 0;
  if (!free_list_.empty()) {
    page = free_list_.back();
    free_list_.pop_back();
  } else {
    page = next_fresh_++;
  }
  in_use_[static_cast<size_t>(page)] = 1;
  ++used_;
  return page;
}

void PagePool::release(int32_t page) {
  DI_CHECK(page >= 0 && page < next_fresh_ && in_use_[static_cast<size_t>(page)] != 0,
           "kv cache page {} released but not in use", page);
  in_use_[static_cast<size_t>(page)] = 0;
  free_list_.push_back(page);
  --used_;
}

}  // namespace di
