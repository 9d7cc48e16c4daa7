#include "backend/cuda/device_buffer.h"

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace di {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(size_t bytes) {
  return static_cast<double>(bytes) / kGiB;
}

void check_range(const char* op, const std::string& tag, size_t offset, size_t nbytes,
                 size_t size) {
  DI_CHECK(offset <= size && nbytes <= size - offset,
           "{} of {} bytes at offset {} exceeds device buffer '{}' of {} bytes", op, nbytes, offset,
           tag, size);
}

}  // namespace

DeviceBuffer::DeviceBuffer(size_t nbytes, std::string_view tag) : tag_(tag) {
  if (nbytes == 0) return;
  const cudaError_t err = cudaMalloc(&data_, nbytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // allocation failures are not sticky; clear them
    data_ = nullptr;
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    const bool have_info = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
    (void)cudaGetLastError();
    DI_FAIL("cudaMalloc of {} bytes ({:.3f} GiB) for '{}' failed: {} ({}){}", nbytes, gib(nbytes),
            tag_, cudaGetErrorName(err), cudaGetErrorString(err),
            have_info
                ? fmt::format("; {:.3f} GiB free of {:.3f} GiB", gib(free_bytes), gib(total_bytes))
                : std::string());
  }
  size_ = nbytes;
}

DeviceBuffer::~DeviceBuffer() {
  reset();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      tag_(std::move(o.tag_)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    tag_ = std::move(o.tag_);
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (data_ != nullptr) (void)cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

void DeviceBuffer::copy_from_host_async(const void* src, size_t nbytes, cudaStream_t stream,
                                        size_t offset) {
  check_range("copy_from_host_async", tag_, offset, nbytes, size_);
  if (nbytes == 0) return;
  DI_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(data_) + offset, src, nbytes,
                                cudaMemcpyHostToDevice, stream));
}

void DeviceBuffer::copy_to_host_async(void* dst, size_t nbytes, cudaStream_t stream,
                                      size_t offset) const {
  check_range("copy_to_host_async", tag_, offset, nbytes, size_);
  if (nbytes == 0) return;
  DI_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const std::byte*>(data_) + offset, nbytes,
                                cudaMemcpyDeviceToHost, stream));
}

void DeviceBuffer::fill_async(uint8_t byte, cudaStream_t stream) {
  if (size_ == 0) return;
  DI_CUDA_CHECK(cudaMemsetAsync(data_, byte, size_, stream));
}

PinnedHostBuffer::PinnedHostBuffer(size_t nbytes, std::string_view tag) {
  if (nbytes == 0) return;
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, nbytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    DI_FAIL("cudaMallocHost of {} bytes ({:.3f} GiB) for '{}' failed: {} ({})", nbytes, gib(nbytes),
            tag, cudaGetErrorName(err), cudaGetErrorString(err));
  }
  data_ = static_cast<std::byte*>(p);
  size_ = nbytes;
}

PinnedHostBuffer::~PinnedHostBuffer() {
  reset();
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void PinnedHostBuffer::reset() noexcept {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
}

Stream::Stream() {
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  reset();
}

Stream::Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    reset();
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void Stream::reset() noexcept {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

cudaStream_t Stream::get() const {
  DI_CHECK(stream_ != nullptr, "use of a moved-from Stream");
  return stream_;
}

void Stream::synchronize() const {
  DI_CUDA_CHECK(cudaStreamSynchronize(get()));
}

Event::Event(bool timing) {
  DI_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  reset();
}

Event::Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    reset();
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void Event::reset() noexcept {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
  event_ = nullptr;
}

cudaEvent_t Event::get() const {
  DI_CHECK(event_ != nullptr, "use of a moved-from Event");
  return event_;
}

void Event::record(cudaStream_t stream) {
  DI_CUDA_CHECK(cudaEventRecord(get(), stream));
}

void Event::synchronize() const {
  DI_CUDA_CHECK(cudaEventSynchronize(get()));
}

bool Event::query() const {
  const cudaError_t err = cudaEventQuery(get());
  if (err == cudaErrorNotReady) return false;  // not an error: the work is still running
  DI_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  DI_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), end.get()));
  return ms;
}

}  // namespace di
