#pragma once

// Sampling of a CUDA forward's chunks where their logits are (SequenceChunk::sampling): the GPU
// sampler (kernels/cuda/ops/sampler.cuh, the CPU sampler's token choices) over the device logits
// rows, so that a decode step copies back token ids, statuses and logprobs — a few bytes per
// sequence — instead of [vocab] fp32 logits per sequence (33 MB at batch 64, plus their widening
// to doubles and a CPU pass over each row).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/pinned_arena.h"
#include "kernels/cuda/ops/sampler.cuh"
#include "model/forward_api.h"

namespace di {

class CudaChunkSampler {
 public:
  // Enqueues on `stream` the sampling of every chunk with `sampling` set, from row
  // logits_row[c] of `logits` ([*, vocab] fp32, device memory). A chunk whose parameters the
  // GPU sampler rejects is left out (its caller samples it from the logits on the host, which
  // reports the same error). Returns, per chunk, whether it was enqueued. The previous
  // enqueue's results must have been collected (its host memory is reused).
  std::vector<bool> enqueue(std::span<const SequenceChunk> chunks,
                            std::span<const int64_t> logits_row, const float* logits, int64_t vocab,
                            cudaStream_t stream);
  // Once the stream has passed the enqueued work: the outcome of every chunk enqueued, nullopt
  // for the others.
  std::vector<std::optional<SampleOutcome>> collect() const;

 private:
  // Grows `b` to at least `bytes` (the stream must have drained work that reads it).
  void reserve(DeviceBuffer& b, size_t bytes, cudaStream_t stream, const char* tag);

  size_t num_chunks_ = 0;
  std::vector<int64_t> row_chunk_;     // [rows] chunk of each sampled row
  std::vector<int32_t> row_logprobs_;  // [rows] SamplerRowParams::logprobs
  std::optional<SamplerOutputBlock> block_;
  std::span<std::byte> host_out_;  // pinned copy of the output block
  PinnedArena host_{"GPU sampler host copies", 64 * 1024};
  DeviceBuffer inputs_, workspace_, outputs_;
};

}  // namespace di
