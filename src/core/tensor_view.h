#pragma once

#include <cstddef>
#include <span>

#include "common/check.h"
#include "common/dtype.h"
#include "core/shape.h"

namespace di {

// Non-owning view of a contiguous row-major tensor (host memory, typically an mmap'ed shard).
// The owner (Checkpoint, HostBuffer, ...) must outlive the view.
struct ConstTensorView {
  const std::byte* data = nullptr;
  DType dtype = DType::kU8;
  Shape shape;

  size_t nbytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype); }
  std::span<const std::byte> bytes() const { return {data, nbytes()}; }

  // Typed access; checks the element size of T against the dtype.
  template <typename T>
  std::span<const T> as() const {
    DI_CHECK(sizeof(T) == dtype_size(dtype), "element size {} does not match dtype {}", sizeof(T),
             dtype_name(dtype));
    DI_CHECK(reinterpret_cast<uintptr_t>(data) % alignof(T) == 0,
             "tensor data is not aligned for {}-byte elements", alignof(T));
    return {reinterpret_cast<const T*>(data), static_cast<size_t>(shape.numel())};
  }
};

struct TensorView {
  std::byte* data = nullptr;
  DType dtype = DType::kU8;
  Shape shape;

  size_t nbytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype); }
  operator ConstTensorView() const { return {data, dtype, shape}; }  // NOLINT
  template <typename T>
  std::span<T> as() const {
    DI_CHECK(sizeof(T) == dtype_size(dtype), "element size {} does not match dtype {}", sizeof(T),
             dtype_name(dtype));
    return {reinterpret_cast<T*>(data), static_cast<size_t>(shape.numel())};
  }
};

}  // namespace di
