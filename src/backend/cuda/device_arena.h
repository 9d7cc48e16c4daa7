#pragma once

// The device side of a WorkspacePlan: one cudaMalloc for the whole plan (plain allocations, no
// managed memory), and typed pointers into it by buffer name. Move-only.

#include <string_view>

#include "backend/cuda/device_buffer.h"
#include "core/workspace_plan.h"

namespace di {

class DeviceArena {
 public:
  DeviceArena() = default;
  // Allocates plan.total_bytes() on the current device. On failure the di::Error names the
  // arena, the size, the free memory and the plan's largest buffers.
  DeviceArena(const WorkspacePlan& plan, std::string_view tag);

  void* data(std::string_view name);
  template <typename T>
  T* as(std::string_view name) {
    return static_cast<T*>(data(name));
  }
  size_t bytes(std::string_view name) const { return plan_.slot(name).bytes; }
  size_t total_bytes() const { return buffer_.size(); }
  const WorkspacePlan& plan() const { return plan_; }

 private:
  WorkspacePlan plan_;
  DeviceBuffer buffer_;
};

}  // namespace di
