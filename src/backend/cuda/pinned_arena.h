#pragma once

// Page-locked host memory for a step's host-to-device uploads. A cudaMemcpyAsync from pageable
// memory waits for the stream's earlier work before it copies, so every mid-step upload would
// make the host wait for the GPU; from pinned memory it is queued like a launch. Allocations stay
// valid (never move) until reset(), which the caller calls only when no queued copy reads them
// (after the step's synchronization). Growth adds chunks; reset() folds them into one chunk of
// the step's total, so a steady state does one cudaHostAlloc. Move-only.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace di {

class PinnedArena {
 public:
  explicit PinnedArena(std::string tag, size_t initial_bytes = size_t{1} << 20);
  ~PinnedArena();
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;
  PinnedArena(PinnedArena&& o) noexcept;
  PinnedArena& operator=(PinnedArena&& o) noexcept;

  // `bytes` of pinned memory aligned to `align` (a power of two <= 4096). Throws di::Error naming
  // the arena and the size when the allocation fails.
  std::span<std::byte> allocate(size_t bytes, size_t align = 64);
  // Every allocation handed out since the last reset becomes free.
  void reset();

  size_t used_bytes() const { return used_total_; }
  size_t capacity_bytes() const;
  size_t chunks() const { return chunks_.size(); }

 private:
  struct Chunk {
    std::byte* data = nullptr;
    size_t size = 0;
  };
  void add_chunk(size_t bytes);
  void release();

  std::string tag_;
  std::vector<Chunk> chunks_;
  size_t offset_ = 0;      // in chunks_.back()
  size_t used_total_ = 0;  // bytes handed out since reset (alignment padding included)
};

}  // namespace di
