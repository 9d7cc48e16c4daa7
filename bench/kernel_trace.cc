#include "kernel_trace.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
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

}  // namespace di::bench
