// Kernel timeline of a benchmark's region through CUPTI's activity API: every kernel's GPU start
// and end as the hardware recorded them, with programmatic dependent launch and streams as they
// ran (unlike an event after every launch, which serialises the kernels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace di::bench {

struct KernelRecord {
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  int32_t grid = 0, block = 0;  // grid x·y·z, threads per CTA
  std::string name;             // demangled, without template arguments and parameters
};

// CUPTI's activity buffers are a process-wide subscription: at most one KernelTrace is alive (a
// second one throws di::Error). Records are collected between start() and stop().
class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  void start();
  // Flushes CUPTI's buffers (the caller has synchronised the device) and returns the records of
  // the region in start order.
  std::vector<KernelRecord> stop();

 private:
  bool running_ = false;
};

// Per kernel name over `steps` repetitions: launches, resident µs (start to end) and µs from the
// previous kernel's end to its own end, per step (sorted by the latter); the span of the region
// per step and the part of it in which no kernel was resident.
void print_kernel_table(const std::vector<KernelRecord>& records, double steps);

// One line per kernel: start and end in µs from the first start, stream, grid, block, name.
void write_kernel_csv(const std::vector<KernelRecord>& records, const std::string& path);

}  // namespace di::bench
