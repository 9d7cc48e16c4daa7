#include "backend/cuda/pinned_arena.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace di {

PinnedArena::PinnedArena(std::string tag, size_t initial_bytes) : tag_(std::move(tag)) {
  if (initial_bytes > 0) add_chunk(initial_bytes);
}

PinnedArena::~PinnedArena() {
  release();
}

PinnedArena::PinnedArena(PinnedArena&& o) noexcept
    : tag_(std::move(o.tag_)),
      chunks_(std::move(o.chunks_)),
      offset_(o.offset_),
      used_total_(o.used_total_) {
  o.chunks_.clear();
  o.offset_ = o.used_total_ = 0;
}

PinnedArena& PinnedArena::operator=(PinnedArena&& o) noexcept {
  if (this != &o) {
    release();
    tag_ = std::move(o.tag_);
    chunks_ = std::move(o.chunks_);
    offset_ = o.offset_;
    used_total_ = o.used_total_;
    o.chunks_.clear();
    o.offset_ = o.used_total_ = 0;
  }
  return *this;
}

void PinnedArena::release() {
  for (const Chunk& c : chunks_)
    cudaFreeHost(c.data);  // destructor path: errors cannot be reported
  chunks_.clear();
  offset_ = 0;
}

void PinnedArena::add_chunk(size_t bytes) {
  void* p = nullptr;
  // Portable: usable by every device of the process (a model may live on any ordinal).
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last-error slot
    DI_FAIL("pinned host memory ({}): cannot allocate {} bytes: {} ({})", tag_, bytes,
            cudaGetErrorName(e), cudaGetErrorString(e));
  }
  chunks_.push_back({static_cast<std::byte*>(p), bytes});
  offset_ = 0;
}

std::span<std::byte> PinnedArena::allocate(size_t bytes, size_t align) {
  DI_CHECK(align > 0 && align <= 4096 && (align & (align - 1)) == 0,
           "pinned host memory ({}): alignment {} is not a power of two <= 4096", tag_, align);
  auto aligned = [&](size_t off) { return (off + align - 1) / align * align; };
  if (chunks_.empty() || aligned(offset_) + bytes > chunks_.back().size) {
    // A new chunk at least twice the last one, and large enough (cudaHostAlloc aligns to pages).
    const size_t last = chunks_.empty() ? 0 : chunks_.back().size;
    add_chunk(std::max({bytes, 2 * last, size_t{1} << 16}));
  }
  const size_t start = aligned(offset_);
  used_total_ += start - offset_ + bytes;
  offset_ = start + bytes;
  return {chunks_.back().data + start, bytes};
}

void PinnedArena::reset() {
  if (chunks_.size() > 1) {
    // Fold the chunks into one of the step's whole size, so the next step needs no growth.
    size_t total = 0;
    for (const Chunk& c : chunks_)
      total += c.size;
    release();
    add_chunk(total);
  }
  offset_ = 0;
  used_total_ = 0;
}

size_t PinnedArena::capacity_bytes() const {
  size_t total = 0;
  for (const Chunk& c : chunks_)
    total += c.size;
  return total;
}

}  // namespace di
