#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "common/check.h"
#include "core/tensor_view.h"

namespace di {

// Owning, 64-byte aligned host allocation. Move-only.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t nbytes) : size_(nbytes) {
    if (nbytes == 0) return;
    size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    data_ = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded));
    if (data_ == nullptr) throw std::bad_alloc();
  }
  ~HostBuffer() { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer(HostBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  void zero() {
    if (data_ != nullptr) std::memset(data_, 0, size_);
  }
  TensorView view(DType dtype, Shape shape) {
    DI_CHECK(static_cast<size_t>(shape.numel()) * dtype_size(dtype) <= size_,
             "view {} {} exceeds buffer of {} bytes", dtype_name(dtype), shape, size_);
    return {data_, dtype, std::move(shape)};
  }

 private:
  static constexpr size_t kAlign = 64;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace di
