#include "core/workspace_plan.h"

#include <algorithm>

#include "common/check.h"

namespace di {

size_t WorkspacePlan::add(std::string_view name, size_t bytes, size_t alignment) {
  DI_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0,
           "workspace buffer '{}': alignment {} is not a power of two", name, alignment);
  for (const Slot& s : slots_) {
    DI_CHECK(s.name != name, "workspace buffer '{}' declared twice", name);
  }
  const size_t offset = (total_ + alignment - 1) & ~(alignment - 1);
  DI_CHECK(offset >= total_ && bytes <= SIZE_MAX - offset,
           "workspace buffer '{}' of {} bytes overflows the plan", name, bytes);
  slots_.push_back(Slot{std::string(name), offset, bytes, alignment});
  total_ = offset + bytes;
  return slots_.size() - 1;
}

const WorkspacePlan::Slot& WorkspacePlan::slot(std::string_view name) const {
  for (const Slot& s : slots_) {
    if (s.name == name) return s;
  }
  DI_FAIL("workspace buffer '{}' was never planned", name);
}

std::string WorkspacePlan::describe() const {
  std::vector<const Slot*> order;
  for (const Slot& s : slots_)
    order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](const Slot* a, const Slot* b) { return a->bytes > b->bytes; });
  std::string out = fmt::format("workspace: {} buffers, {} bytes", slots_.size(), total_);
  for (const Slot* s : order)
    out += fmt::format("\n  {:>14} B  {}", s->bytes, s->name);
  return out;
}

}  // namespace di
