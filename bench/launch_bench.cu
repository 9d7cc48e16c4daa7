// launch_bench: the GPU-side cost of a chain of dependent kernel launches on the H200 — what a
// decode step of ~1,200 short kernels pays per kernel beyond its work — for four ways of issuing
// them: plain stream launches, stream launches with programmatic dependent launch (PDL, as the
// CUDA forward does), a CUDA graph of plain launches, and a CUDA graph captured from PDL launches
// (programmatic edges). Each kernel waits for its predecessor (griddepcontrol.wait), then every
// thread reads one value the predecessor wrote and writes it on (a true dependency). The stream
// variants are queued behind a GPU spin so that the host has enqueued the whole chain before the
// GPU starts (GPU time only). Shapes: 1 CTA x 128 threads, 132 x 128, 528 x 256 (the forward's
// typical grids). Output: microseconds per kernel (median of 5 chains).
//
// Usage: launch_bench [kernels per chain, default 400]

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_spin.h"
#include "kernels/cuda/pdl.cuh"

namespace {

__global__ void step_kernel(const float* in, float* out, int n) {
  di::cuda_detail::pdl_wait();
  di::cuda_detail::pdl_launch_dependents();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] + 1.0f;
}

struct Shape {
  unsigned ctas, threads;
};

void enqueue(const Shape& s, int kernels, bool pdl, float* a, float* b, cudaStream_t stream) {
  const int n = static_cast<int>(s.ctas * s.threads);
  for (int k = 0; k < kernels; ++k) {
    const float* in = k % 2 == 0 ? a : b;
    float* out = k % 2 == 0 ? b : a;
    if (pdl) {
      di::cuda_detail::launch_pdl(step_kernel, dim3(s.ctas), dim3(s.threads), 0, stream, in, out,
                                  n);
    } else {
      step_kernel<<<s.ctas, s.threads, 0, stream>>>(in, out, n);
      DI_CUDA_CHECK(cudaGetLastError());
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace di;  // NOLINT
  const int kernels = argc > 1 ? std::atoi(argv[1]) : 400;
  if (kernels < 2 || kernels > 4000) {
    std::fprintf(stderr, "usage: %s [kernels per chain, 2..4000]\n", argv[0]);
    return 2;
  }
  Stream stream;
  DeviceBuffer a(528 * 256 * 4, "a"), b(528 * 256 * 4, "b");
  a.fill_async(0, stream.get());
  b.fill_async(0, stream.get());
  Event start(true), end(true);
  std::printf("%d dependent kernels per chain, us per kernel (median of 5 chains)\n", kernels);
  std::printf("%-12s %10s %10s %10s %10s\n", "grid", "stream", "stream+PDL", "graph", "graph+PDL");
  for (const Shape s : {Shape{1, 128}, Shape{132, 128}, Shape{528, 256}}) {
    double us[4];
    for (int mode = 0; mode < 4; ++mode) {
      const bool pdl = mode % 2 == 1, graph = mode >= 2;
      CudaGraph g;
      if (graph) {
        g.capture(stream.get(), [&](cudaStream_t st) {
          enqueue(s, kernels, pdl, a.as<float>(), b.as<float>(), st);
        });
      }
      std::vector<double> t;
      for (int trial = 0; trial < 6; ++trial) {
        if (graph) {
          start.record(stream.get());
          g.replay(stream.get());
        } else {
          // The host enqueues the chain while the spin holds the stream; timing starts after it.
          gpu_spin(10.0 * kernels + 500, stream.get());
          start.record(stream.get());
          enqueue(s, kernels, pdl, a.as<float>(), b.as<float>(), stream.get());
        }
        end.record(stream.get());
        end.synchronize();
        if (trial > 0) t.push_back(1000.0 * Event::elapsed_ms(start, end) / kernels);
      }
      us[mode] = median(t);
    }
    std::printf("%4u x %-5u %10.2f %10.2f %10.2f %10.2f\n", s.ctas, s.threads, us[0], us[1], us[2],
                us[3]);
  }
  return 0;
}
