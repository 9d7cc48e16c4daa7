#include "kernel_trace.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "common/check.h"

namespace di::bench {
namespace {

constexpr size_t kBufferBytes = 8u << 20;

// The records CUPTI hands back, for the one live KernelTrace (CUPTI's callbacks carry no user
// pointer: the subscription is per process).
struct Sink {
  std::mutex mu;
  std::vector<KernelRecord> records;
  bool owned = false;
};

Sink& sink() {
  static Sink s;
  return s;
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  DI_FAIL("CUPTI {} failed: {}", what, msg != nullptr ? msg : "unknown error");
}

std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  std::string s = status == 0 && d ? d.get() : mangled;
  for (size_t a; (a = s.find("(anonymous namespace)::")) != std::string::npos;)
    s.erase(a, 23);
  // "void ns::kernel<...>(...)" -> "kernel": cut at the first '<' or '(' of the name, drop the
  // return type and namespaces.
  const size_t cut = s.find_first_of("<(");
  if (cut != std::string::npos) s.resize(cut);
  const size_t sp = s.rfind(' ');
  if (sp != std::string::npos) s = s.substr(sp + 1);
  const size_t ns = s.rfind("::");
  if (ns != std::string::npos) s = s.substr(ns + 2);
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Sink& s = sink();
  CUpti_Activity* rec = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
          rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
        continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      KernelRecord r;
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.stream = k->streamId;
      r.grid = k->gridX * k->gridY * k->gridZ;
      r.block = k->blockX * k->blockY * k->blockZ;
      r.name = short_name(k->name);
      s.records.push_back(std::move(r));
    }
  }
  std::free(buffer);
}

}  // namespace

KernelTrace::KernelTrace() {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mu);
  DI_CHECK(!s.owned, "only one KernelTrace may be alive (CUPTI's subscription is per process)");
  s.owned = true;
  s.records.clear();
}

KernelTrace::~KernelTrace() {
  if (running_) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mu);
  s.owned = false;
  s.records.clear();
}

void KernelTrace::start() {
  DI_CHECK(!running_, "KernelTrace::start: already started");
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
        "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  running_ = true;
}

std::vector<KernelRecord> KernelTrace::stop() {
  DI_CHECK(running_, "KernelTrace::stop: not started");
  running_ = false;
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
  Sink& s = sink();
  std::vector<KernelRecord> out;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    out.swap(s.records);
  }
  std::stable_sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return a.start_ns < b.start_ns;
  });
  return out;
}

void print_kernel_table(const std::vector<KernelRecord>& records, double steps) {
  if (records.empty()) {
    std::printf("kernel trace: no kernels recorded\n");
    return;
  }
  struct Row {
    double ns = 0, after_prev_ns = 0;
    int64_t launches = 0;
  };
  std::map<std::string, Row> by_name;
  uint64_t first = records.front().start_ns, last = 0, idle = 0, covered_to = first;
  for (const KernelRecord& r : records) {
    Row& row = by_name[r.name];
    row.ns += static_cast<double>(r.end_ns - r.start_ns);
    ++row.launches;
    // Records are in start order: a start past everything that ran so far opens an idle gap.
    if (r.start_ns > covered_to) idle += r.start_ns - covered_to;
    covered_to = std::max(covered_to, r.end_ns);
    last = std::max(last, r.end_ns);
  }
  // A kernel launched early (programmatic dependent launch) is resident while it waits for its
  // predecessor, so its duration overlaps the one before. "From the previous end": the time from
  // the latest end of any kernel before it (in end order) to its own end — these add up to the
  // span less the first kernel's start, and charge launch gaps to the kernel after them.
  std::vector<const KernelRecord*> by_end;
  by_end.reserve(records.size());
  for (const KernelRecord& r : records)
    by_end.push_back(&r);
  std::stable_sort(by_end.begin(), by_end.end(), [](const KernelRecord* a, const KernelRecord* b) {
    return a->end_ns < b->end_ns;
  });
  uint64_t prev_end = first;
  for (const KernelRecord* r : by_end) {
    by_name[r->name].after_prev_ns += static_cast<double>(r->end_ns - prev_end);
    prev_end = r->end_ns;
  }
  std::vector<std::pair<std::string, Row>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.after_prev_ns > b.second.after_prev_ns;
  });
  double all = 0;
  for (const auto& [name, row] : rows)
    all += row.ns;
  const double span = static_cast<double>(last - first);
  std::printf("%-40s %9s %9s %9s %9s %7s\n", "kernel (CUPTI, per step)", "launches", "resident",
              "us each", "from prev", "share");
  for (const auto& [name, row] : rows) {
    std::printf("%-40s %9.1f %9.1f %9.2f %9.1f %6.1f%%\n", name.c_str(),
                static_cast<double>(row.launches) / steps, row.ns / 1e3 / steps,
                row.ns / 1e3 / static_cast<double>(row.launches), row.after_prev_ns / 1e3 / steps,
                100.0 * row.after_prev_ns / span);
  }
  std::printf(
      "kernel trace: span %.1f us per step, no kernel resident %.1f us per step, resident time "
      "summed %.1f us per step (> span where kernels overlap)\n",
      span / 1e3 / steps, static_cast<double>(idle) / 1e3 / steps, all / 1e3 / steps);
}

void write_kernel_csv(const std::vector<KernelRecord>& records, const std::string& path) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  DI_CHECK(f != nullptr, "cannot write the kernel trace to {}", path);
  std::fprintf(f.get(), "start_us,end_us,stream,grid,block,kernel\n");
  const uint64_t t0 = records.empty() ? 0 : records.front().start_ns;
  for (const KernelRecord& r : records) {
    std::fprintf(f.get(), "%.3f,%.3f,%u,%d,%d,%s\n", static_cast<double>(r.start_ns - t0) / 1e3,
                 static_cast<double>(r.end_ns - t0) / 1e3, r.stream, r.grid, r.block,
                 r.name.c_str());
  }
}

}  // namespace di::bench
