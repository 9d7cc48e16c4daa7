#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace di {

// Read-only memory map of a whole file (RAII, move-only). Pages are only read when touched, so
// mapping a multi-GB shard costs no memory until its tensors are used.
class MappedFile {
 public:
  MappedFile() = default;
  // Throws di::Error naming the path when the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  // Drops the resident pages of [offset, offset + len) from this process (they are read from the
  // file again if touched later). Keeps RSS bounded while streaming over a large mapping.
  void release(size_t offset, size_t len) const noexcept;

 private:
  void reset() noexcept;
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Marks a mapped range as randomly accessed (madvise MADV_RANDOM on the pages it spans): a page
// fault then reads that page only, with no readahead. For tables read a few rows at a time at
// random (the Engram tables): with readahead every row costs ~32 pages of I/O or zero-fill, which
// measured ~300x slower on a sparse 92 GiB file (docs/PERF.md). Best effort: errors are ignored.
void advise_random_access(std::span<const std::byte> range) noexcept;

// Maps every page of a mapped range into this process now (madvise MADV_POPULATE_READ, Linux
// 5.14+), reading from the file what is not in the page cache: later reads of the range take no
// page fault while the pages stay resident. For the Engram tables, whose random rows otherwise
// cost a fault each on first touch (docs/PERF.md, thirteenth session). Returns false, having done
// nothing, when the kernel lacks MADV_POPULATE_READ; throws di::Error on other failures (e.g. a
// range that is not mapped).
bool populate_read(std::span<const std::byte> range);

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t available_memory_bytes();

}  // namespace di
