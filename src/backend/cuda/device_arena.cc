#include "backend/cuda/device_arena.h"

#include "common/check.h"

namespace di {

DeviceArena::DeviceArena(const WorkspacePlan& plan, std::string_view tag) : plan_(plan) {
  try {
    buffer_ = DeviceBuffer(plan.total_bytes(), tag);
  } catch (const Error& e) {
    DI_FAIL("{}\n{}", e.what(), plan.describe());
  }
}

void* DeviceArena::data(std::string_view name) {
  const WorkspacePlan::Slot& s = plan_.slot(name);
  return static_cast<std::byte*>(buffer_.data()) + s.offset;
}

}  // namespace di
