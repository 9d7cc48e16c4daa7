#pragma once

// RAII, move-only owners of CUDA resources: device memory, pinned host memory, streams and events.
// Destructors never throw (release errors are ignored: there is nothing a destructor can do).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace di {

// Device memory from cudaMalloc on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates nbytes (0 allocates nothing). `tag` names the allocation (op, tensor, pool) in the
  // error thrown when the allocation fails, together with the requested size and the free memory.
  DeviceBuffer(size_t nbytes, std::string_view tag);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::string& tag() const { return tag_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }

  // Stream-ordered copies and fill; the byte ranges are bounds-checked (di::Error). They do not
  // synchronize: the host memory must stay valid until the stream reaches the copy.
  void copy_from_host_async(const void* src, size_t nbytes, cudaStream_t stream, size_t offset = 0);
  void copy_to_host_async(void* dst, size_t nbytes, cudaStream_t stream, size_t offset = 0) const;
  void fill_async(uint8_t byte, cudaStream_t stream);

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string tag_;
};

// Page-locked host memory from cudaMallocHost (fast, truly asynchronous H2D/D2H copies).
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(size_t nbytes, std::string_view tag);
  ~PinnedHostBuffer();
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer(PinnedHostBuffer&& o) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& o) noexcept;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  void reset() noexcept;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// A non-blocking stream (does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;

  // Throws on a moved-from Stream: a null handle would silently mean the legacy default stream.
  cudaStream_t get() const;
  void synchronize() const;

 private:
  void reset() noexcept;
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  // Timing events cost more to record; leave timing off for pure synchronization.
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;

  cudaEvent_t get() const;
  void record(cudaStream_t stream);
  void synchronize() const;
  // True once all work captured by the last record() has completed.
  bool query() const;
  // Milliseconds between two recorded timing events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  void reset() noexcept;
  cudaEvent_t event_ = nullptr;
};

}  // namespace di
