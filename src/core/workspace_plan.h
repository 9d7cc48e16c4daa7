#pragma once

// Workspace planning (plan/run split, architecture.md rule 2): every buffer a step needs — the
// activations of the largest batch, kernel scratch — is declared once with its size and
// alignment; the plan lays them out in one region, which a backend allocates once (a device
// arena on CUDA) before any step runs. Launchers then only receive pointers: nothing allocates
// on the hot path, and an out-of-memory error happens at start-up, naming the buffer.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di {

class WorkspacePlan {
 public:
  struct Slot {
    std::string name;
    size_t offset = 0;
    size_t bytes = 0;
    size_t alignment = 0;
  };

  // Adds a buffer; returns its slot index. alignment: a power of two (default 256 B, what TMA and
  // vectorized loads want). Throws di::Error on a bad alignment, a duplicate name or overflow.
  size_t add(std::string_view name, size_t bytes, size_t alignment = 256);

  size_t total_bytes() const { return total_; }
  const std::vector<Slot>& slots() const { return slots_; }
  const Slot& slot(std::string_view name) const;  // throws di::Error naming an unknown buffer
  // One line per buffer, largest first (for the start-up log and OOM messages).
  std::string describe() const;

 private:
  std::vector<Slot> slots_;
  size_t total_ = 0;
};

}  // namespace di
