#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "common/check.h"

namespace di {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) DI_FAIL("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    DI_FAIL("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    DI_FAIL("{}: not a regular file", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      DI_FAIL("{}: cannot mmap {} bytes: {}", path, size_, std::strerror(err));
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace di

namespace di {

void MappedFile::release(size_t offset, size_t len) const noexcept {
  if (data_ == nullptr || offset >= size_) return;
  len = std::min(len, size_ - offset);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Whole pages inside the range only: neighbouring tensors may share the edge pages.
  const size_t begin = (offset + page - 1) / page * page;
  const size_t end = (offset + len) / page * page;
  if (end > begin) ::madvise(const_cast<std::byte*>(data_) + begin, end - begin, MADV_DONTNEED);
}

void advise_random_access(std::span<const std::byte> range) noexcept {
  if (range.empty()) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // The pages the range touches (neighbours sharing the edge pages only lose their readahead).
  const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data()) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(range.data()) + range.size();
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_RANDOM);
}

bool populate_read(std::span<const std::byte> range) {
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14 (older headers lack it)
#endif
  if (range.empty()) return true;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data()) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(range.data()) + range.size();
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0) return true;
  const int err = errno;
  if (err == EINVAL) return false;  // no MADV_POPULATE_READ in this kernel
  DI_FAIL("madvise(MADV_POPULATE_READ) of {} bytes failed: {}", end - begin, std::strerror(err));
}

uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    uint64_t value = 0;
    std::string unit;
    if (!(in >> value)) return 0;
    in >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return 0;
}

}  // namespace di
