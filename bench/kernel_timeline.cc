#include "kernel_timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "common/check.h"

namespace di::bench {
namespace {

void by_start(std::vector<KernelRecord>& records) {
  std::stable_sort(
      records.begin(), records.end(),
      [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
}

}  // namespace

KernelSummary summarize_kernels(std::vector<KernelRecord> records) {
  KernelSummary out;
  if (records.empty()) return out;
  by_start(records);
  std::map<std::string, KernelRow> by_name;
  const uint64_t first = records.front().start_ns;
  uint64_t last = 0, idle = 0, covered_to = first;
  for (const KernelRecord& r : records) {
    KernelRow& row = by_name[r.name];
    row.name = r.name;
    row.resident_ns += static_cast<double>(r.end_ns - r.start_ns);
    ++row.launches;
    // In start order: a start past everything that ran so far opens an idle gap.
    if (r.start_ns > covered_to) idle += r.start_ns - covered_to;
    covered_to = std::max(covered_to, r.end_ns);
    last = std::max(last, r.end_ns);
  }
  std::vector<const KernelRecord*> by_end;
  by_end.reserve(records.size());
  for (const KernelRecord& r : records)
    by_end.push_back(&r);
  std::stable_sort(by_end.begin(), by_end.end(), [](const KernelRecord* a, const KernelRecord* b) {
    return a->end_ns < b->end_ns;
  });
  uint64_t prev_end = first;
  for (const KernelRecord* r : by_end) {
    by_name[r->name].from_prev_ns += static_cast<double>(r->end_ns - prev_end);
    prev_end = r->end_ns;
  }
  for (auto& [name, row] : by_name) {
    out.resident_ns += row.resident_ns;
    out.rows.push_back(std::move(row));
  }
  std::stable_sort(out.rows.begin(), out.rows.end(), [](const KernelRow& a, const KernelRow& b) {
    return a.from_prev_ns > b.from_prev_ns;
  });
  out.span_ns = static_cast<double>(last - first);
  out.idle_ns = static_cast<double>(idle);
  return out;
}

void print_kernel_table(const KernelSummary& s, double steps) {
  if (s.rows.empty()) {
    std::printf("kernel trace: no kernels recorded\n");
    return;
  }
  std::printf("%-40s %9s %9s %9s %9s %7s\n", "kernel (CUPTI, per step)", "launches", "resident",
              "us each", "from prev", "share");
  for (const KernelRow& row : s.rows) {
    std::printf("%-40s %9.1f %9.1f %9.2f %9.1f %6.1f%%\n", row.name.c_str(),
                static_cast<double>(row.launches) / steps, row.resident_ns / 1e3 / steps,
                row.resident_ns / 1e3 / static_cast<double>(row.launches),
                row.from_prev_ns / 1e3 / steps,
                s.span_ns > 0 ? 100.0 * row.from_prev_ns / s.span_ns : 0.0);
  }
  std::printf(
      "kernel trace: span %.1f us per step, no kernel resident %.1f us per step, resident time "
      "summed %.1f us per step (> span where kernels overlap)\n",
      s.span_ns / 1e3 / steps, s.idle_ns / 1e3 / steps, s.resident_ns / 1e3 / steps);
}

void write_kernel_csv(std::vector<KernelRecord> records, const std::string& path) {
  by_start(records);
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  DI_CHECK(f != nullptr, "cannot write the kernel trace to {}", path);
  std::fprintf(f.get(), "start_us,end_us,stream,grid,block,kernel\n");
  const uint64_t t0 = records.empty() ? 0 : records.front().start_ns;
  for (const KernelRecord& r : records) {
    std::fprintf(f.get(), "%.3f,%.3f,%u,%d,%d,%s\n", static_cast<double>(r.start_ns - t0) / 1e3,
                 static_cast<double>(r.end_ns - t0) / 1e3, r.stream, r.grid, r.block,
                 r.name.c_str());
  }
  DI_CHECK(std::fflush(f.get()) == 0, "cannot write the kernel trace to {}", path);
}

}  // namespace di::bench
