// The kernels of a traced region as intervals, and what they add up to: per kernel name the
// launches, the resident time (start to end) and the time from the previous kernel's end; the
// region's span and the part of it with no kernel resident. Pure host code (the CUPTI collection
// is kernel_trace.h), unit-tested without a GPU.
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

struct KernelRow {
  std::string name;
  int64_t launches = 0;
  double resident_ns = 0;  // start to end, summed (a PDL kernel is resident while it waits)
  // Its end minus the latest end of any kernel that ended before it (in end order), summed: the
  // rows add up to the span, and a launch gap is charged to the kernel after it.
  double from_prev_ns = 0;
};

struct KernelSummary {
  std::vector<KernelRow> rows;  // largest from_prev_ns first
  double span_ns = 0;           // first start to last end
  double idle_ns = 0;           // time in the span with no kernel resident
  double resident_ns = 0;       // all rows' resident_ns (> span where kernels overlap)
};

// The records in any order.
KernelSummary summarize_kernels(std::vector<KernelRecord> records);

// The summary per step of `steps` repetitions, as a table on stdout.
void print_kernel_table(const KernelSummary& summary, double steps);

// One line per kernel, in start order: start and end in µs from the first start, stream, grid,
// block, name. Throws di::Error naming the path when it cannot be written.
void write_kernel_csv(std::vector<KernelRecord> records, const std::string& path);

// The records of a CSV written by write_kernel_csv (times back in ns, rounded). Throws di::Error
// naming the path and line when the file cannot be read or a line is not such a record.
std::vector<KernelRecord> read_kernel_csv(const std::string& path);

// One kernel name in two summaries (A, B) of the same work: launches and "from prev" ns, zero
// where the name is absent from one side.
struct KernelDelta {
  std::string name;
  int64_t launches_a = 0, launches_b = 0;
  double from_prev_a_ns = 0, from_prev_b_ns = 0;
};

// Every name of either summary, the largest |B - A| of "from prev" first (ties by name). The
// deltas add up to the difference of the spans.
std::vector<KernelDelta> diff_kernels(const KernelSummary& a, const KernelSummary& b);

// The deltas per step of `steps` repetitions, as a table on stdout: the first `top` rows, then
// the spans of both sides and the rest summed.
void print_kernel_diff(const std::vector<KernelDelta>& deltas, const KernelSummary& a,
                       const KernelSummary& b, double steps, size_t top);

}  // namespace di::bench
