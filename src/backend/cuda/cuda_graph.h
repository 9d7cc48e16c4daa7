#pragma once

// Capture and replay of one fixed-shape step as a CUDA graph (RAII, move-only). Everything the
// captured work reads and writes must live at fixed addresses (a DeviceArena) and the launch
// parameters must not change between replays; inputs change by writing into those buffers.

#include <cuda_runtime_api.h>

#include <functional>

namespace di {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  CudaGraph(CudaGraph&& o) noexcept;
  CudaGraph& operator=(CudaGraph&& o) noexcept;

  // Records what `work` enqueues on `stream` (thread-local capture mode) and instantiates it.
  // `stream` must be a non-default stream. If `work` throws, the capture is ended and discarded
  // and the exception propagates.
  void capture(cudaStream_t stream, const std::function<void(cudaStream_t)>& work);
  // Enqueues one replay on `stream` (does not synchronize).
  void replay(cudaStream_t stream) const;
  bool captured() const { return exec_ != nullptr; }
  size_t num_nodes() const;

 private:
  void reset() noexcept;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace di
