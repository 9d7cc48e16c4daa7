#include "backend/cuda/cuda_graph.h"

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace di {

CudaGraph::~CudaGraph() {
  reset();
}

CudaGraph::CudaGraph(CudaGraph&& o) noexcept : graph_(o.graph_), exec_(o.exec_) {
  o.graph_ = nullptr;
  o.exec_ = nullptr;
}

CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    reset();
    graph_ = o.graph_;
    exec_ = o.exec_;
    o.graph_ = nullptr;
    o.exec_ = nullptr;
  }
  return *this;
}

void CudaGraph::reset() noexcept {
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void CudaGraph::capture(cudaStream_t stream, const std::function<void(cudaStream_t)>& work) {
  DI_CHECK(stream != nullptr, "CUDA graph capture needs a non-default stream");
  reset();
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    work(stream);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream, &broken);
    if (broken != nullptr) (void)cudaGraphDestroy(broken);
    throw;
  }
  DI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
  DI_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::replay(cudaStream_t stream) const {
  DI_CHECK(exec_ != nullptr, "CUDA graph replay before capture");
  DI_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

size_t CudaGraph::num_nodes() const {
  if (graph_ == nullptr) return 0;
  size_t n = 0;
  DI_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
  return n;
}

}  // namespace di
