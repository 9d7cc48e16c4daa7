#include "kernel_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

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

std::vector<KernelRecord> read_kernel_csv(const std::string& path) {
  std::ifstream in(path);
  DI_CHECK(in.good(), "cannot read the kernel trace {}", path);
  std::string line;
  DI_CHECK(std::getline(in, line) && line == "start_us,end_us,stream,grid,block,kernel",
           "{}: line 1 is not the kernel trace header start_us,end_us,stream,grid,block,kernel",
           path);
  std::vector<KernelRecord> out;
  const auto to_ns = [](double us) { return static_cast<uint64_t>(std::llround(us * 1e3)); };
  for (int64_t n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    // Five numeric fields, then the name (the rest of the line).
    std::istringstream fields(line);
    double start_us = 0, end_us = 0;
    int64_t stream = 0, grid = 0, block = 0;
    char c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
    KernelRecord r;
    const bool ok = static_cast<bool>(fields >> start_us >> c1 >> end_us >> c2 >> stream >> c3 >>
                                      grid >> c4 >> block >> c5) &&
                    c1 == ',' && c2 == ',' && c3 == ',' && c4 == ',' && c5 == ',' &&
                    std::getline(fields, r.name) && !r.name.empty() && start_us >= 0 &&
                    end_us >= start_us && stream >= 0 && stream <= UINT32_MAX && grid >= 0 &&
                    block >= 0;
    DI_CHECK(ok,
             "{}: line {} is not a kernel record (start_us,end_us,stream,grid,block,kernel): "
             "'{}'",
             path, n, line);
    r.start_ns = to_ns(start_us);
    r.end_ns = to_ns(end_us);
    r.stream = static_cast<uint32_t>(stream);
    r.grid = static_cast<int32_t>(grid);
    r.block = static_cast<int32_t>(block);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<KernelDelta> diff_kernels(const KernelSummary& a, const KernelSummary& b) {
  std::map<std::string, KernelDelta> by_name;
  for (const KernelRow& r : a.rows) {
    KernelDelta& d = by_name[r.name];
    d.name = r.name;
    d.launches_a = r.launches;
    d.from_prev_a_ns = r.from_prev_ns;
  }
  for (const KernelRow& r : b.rows) {
    KernelDelta& d = by_name[r.name];
    d.name = r.name;
    d.launches_b = r.launches;
    d.from_prev_b_ns = r.from_prev_ns;
  }
  std::vector<KernelDelta> out;
  out.reserve(by_name.size());
  for (auto& [name, d] : by_name)
    out.push_back(std::move(d));
  // by_name gave name order; a stable sort keeps it among equal deltas.
  std::stable_sort(out.begin(), out.end(), [](const KernelDelta& x, const KernelDelta& y) {
    return std::abs(x.from_prev_b_ns - x.from_prev_a_ns) >
           std::abs(y.from_prev_b_ns - y.from_prev_a_ns);
  });
  return out;
}

void print_kernel_diff(const std::vector<KernelDelta>& deltas, const KernelSummary& a,
                       const KernelSummary& b, double steps, size_t top) {
  std::printf("%-40s %9s %9s %10s %10s %9s\n", "kernel (from prev, per step)", "launch A",
              "launch B", "A us", "B us", "B - A");
  double rest_a = 0, rest_b = 0;
  for (size_t i = 0; i < deltas.size(); ++i) {
    const KernelDelta& d = deltas[i];
    if (i >= top) {
      rest_a += d.from_prev_a_ns;
      rest_b += d.from_prev_b_ns;
      continue;
    }
    std::printf("%-40s %9.1f %9.1f %10.1f %10.1f %+9.1f\n", d.name.c_str(),
                static_cast<double>(d.launches_a) / steps,
                static_cast<double>(d.launches_b) / steps, d.from_prev_a_ns / 1e3 / steps,
                d.from_prev_b_ns / 1e3 / steps,
                (d.from_prev_b_ns - d.from_prev_a_ns) / 1e3 / steps);
  }
  if (deltas.size() > top) {
    std::printf("%-40s %9s %9s %10.1f %10.1f %+9.1f\n", "(the other kernels)", "", "",
                rest_a / 1e3 / steps, rest_b / 1e3 / steps, (rest_b - rest_a) / 1e3 / steps);
  }
  std::printf("span per step: A %.1f us, B %.1f us (%+.1f us)\n", a.span_ns / 1e3 / steps,
              b.span_ns / 1e3 / steps, (b.span_ns - a.span_ns) / 1e3 / steps);
}

}  // namespace di::bench
