#pragma once

#include <cstdint>
#include <vector>

namespace di {

// A pool of `num_pages` interchangeable page ids [0, num_pages). Freed ids are reused
// last-freed-first; ids never handed out yet are taken in increasing order. The sequence of ids
// therefore depends only on the sequence of take/release calls (deterministic).
class PagePool {
 public:
  explicit PagePool(int64_t num_pages);

  int64_t total() const { return total_; }
  int64_t free() const { return total_ - used_; }
  int64_t used() const { return used_; }

  // Takes one free page id. Throws di::Error when none is free.
  int32_t take();
  // Returns a page id taken earlier. Throws di::Error on an id not in use (double free).
  void release(int32_t page);

 private:
  int64_t total_ = 0;
  int64_t used_ = 0;
  int32_t next_fresh_ = 0;          // ids >= next_fresh_ were never taken
  std::vector<int32_t> free_list_;  // released ids, reused last-in first-out
  std::vector<uint8_t> in_use_;     // per id: 1 while taken
};

}  // namespace di
