// Kernel timeline of a benchmark's region through CUPTI's activity API: every kernel's GPU start
// and end as the hardware recorded them, with programmatic dependent launch and streams as they
// ran (unlike an event after every launch, which serialises the kernels).
#pragma once

#include <vector>

#include "kernel_timeline.h"

namespace di::bench {

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

}  // namespace di::bench
