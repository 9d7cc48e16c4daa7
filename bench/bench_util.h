#pragma once

// Helpers shared by the CUDA benchmarks (header-only; benchmarks only, never tests): uploads,
// per-launch time of a CUDA graph of repeated launches, and the device-to-device copy bandwidth
// that the memory-bound kernels are compared with.

#include <cuda_runtime_api.h>
#include <execinfo.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/device_buffer.h"

namespace di::bench {

// A benchmark that crashes on the GPU machine (no debugger there) prints its stack to stderr:
// "binary(+0xOFFSET)" frames, which `addr2line -f -C -e BINARY OFFSET` resolves where it was built.
inline void backtrace_on_crash() {
  void* prime[1];
  (void)backtrace(prime, 1);  // loads libgcc's unwinder now, not inside the handler
  auto handler = [](int sig) {
    void* frames[64];
    const int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  };
  std::signal(SIGSEGV, handler);
  std::signal(SIGABRT, handler);
  std::signal(SIGBUS, handler);
}

// A device copy of a host vector (synchronised: benchmark set-up only).
template <typename T>
DeviceBuffer upload(const std::vector<T>& v, cudaStream_t stream, const char* tag) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16), tag);
  b.copy_from_host_async(v.data(), v.size() * sizeof(T), stream);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  return b;
}

// Median per-launch microseconds of `reps` calls of work(i, stream) captured in one graph
// (two eager warm-up calls, then 5 timed replays; no launch gaps inside the graph).
inline double graph_time_us(Stream& stream, int reps,
                            const std::function<void(int, cudaStream_t)>& work) {
  for (int i = 0; i < 2; ++i)
    work(i, stream.get());
  CudaGraph graph;
  graph.capture(stream.get(), [&](cudaStream_t s) {
    for (int i = 0; i < reps; ++i)
      work(i, s);
  });
  graph.replay(stream.get());
  Event start(true), end(true);
  std::vector<double> t;
  for (int trial = 0; trial < 5; ++trial) {
    start.record(stream.get());
    graph.replay(stream.get());
    end.record(stream.get());
    end.synchronize();
    t.push_back(1000.0 * Event::elapsed_ms(start, end) / reps);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

// Read + write bytes per second (GB/s) of a device-to-device copy of `bytes` (median of 5 after
// 2 warm-ups; timed on the stream, not in a graph: a graph's memcpy node may use a copy engine).
inline double copy_gbs(Stream& stream, size_t bytes = size_t{2} << 30) {
  DeviceBuffer a(bytes, "copy src"), b(bytes, "copy dst");
  a.fill_async(0x5A, stream.get());
  std::vector<double> t;
  Event start(true), end(true);
  for (int trial = 0; trial < 7; ++trial) {
    start.record(stream.get());
    DI_CUDA_CHECK(
        cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    end.record(stream.get());
    end.synchronize();
    if (trial >= 2) t.push_back(1000.0 * Event::elapsed_ms(start, end));
  }
  std::sort(t.begin(), t.end());
  return 2.0 * static_cast<double>(bytes) / (t[t.size() / 2] * 1e-6) / 1e9;
}

}  // namespace di::bench
