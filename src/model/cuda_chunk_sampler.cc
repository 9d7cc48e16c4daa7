#include "model/cuda_chunk_sampler.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace di {
namespace {

size_t align16(size_t bytes) {
  return (bytes + 15) / 16 * 16;
}

}  // namespace

void CudaChunkSampler::reserve(DeviceBuffer& b, size_t bytes, cudaStream_t stream,
                               const char* tag) {
  if (b.size() >= bytes) return;
  // The old buffer may still be read by queued work.
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  b = DeviceBuffer(align16(bytes + bytes / 4), tag);
}

std::vector<bool> CudaChunkSampler::enqueue(std::span<const SequenceChunk> chunks,
                                            std::span<const int64_t> logits_row,
                                            const float* logits, int64_t vocab,
                                            cudaStream_t stream) {
  DI_CHECK(logits_row.size() == chunks.size(), "CudaChunkSampler: {} logits rows for {} chunks",
           logits_row.size(), chunks.size());
  host_.reset();
  num_chunks_ = chunks.size();
  row_chunk_.clear();
  row_logprobs_.clear();
  block_.reset();
  host_out_ = {};
  std::vector<bool> enqueued(chunks.size(), false);
  std::vector<SamplerRowParams> rows;
  std::vector<int64_t> ids, rows_in_logits;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ChunkSampling* s = chunks[c].sampling;
    if (s == nullptr || s->params == nullptr) continue;
    const size_t keep = ids.size();
    try {
      const SamplerRow& in = s->row;
      rows.push_back(make_sampler_row(*s->params, in.seed, in.position, in.prompt_ids,
                                      in.output_ids, in.eos_ids, in.suppress_stop_tokens, vocab,
                                      ids));
    } catch (const Error&) {
      ids.resize(keep);  // the host sampler reports this chunk's error
      continue;
    }
    rows_in_logits.push_back(logits_row[c]);
    row_chunk_.push_back(static_cast<int64_t>(c));
    row_logprobs_.push_back(rows.back().logprobs);
    enqueued[c] = true;
  }
  if (rows.empty()) return enqueued;
  const auto n = static_cast<int64_t>(rows.size());

  // One upload: [row params][logits rows][id lists].
  const size_t params_bytes = align16(rows.size() * sizeof(SamplerRowParams));
  const size_t lrows_bytes = align16(rows_in_logits.size() * sizeof(int64_t));
  const size_t ids_bytes = std::max<size_t>(ids.size() * sizeof(int64_t), 16);
  const size_t in_bytes = params_bytes + lrows_bytes + ids_bytes;
  const std::span<std::byte> in = host_.allocate(in_bytes, 64);
  std::memcpy(in.data(), rows.data(), rows.size() * sizeof(SamplerRowParams));
  std::memcpy(in.data() + params_bytes, rows_in_logits.data(),
              rows_in_logits.size() * sizeof(int64_t));
  if (!ids.empty()) {
    std::memcpy(in.data() + params_bytes + lrows_bytes, ids.data(), ids.size() * sizeof(int64_t));
  }
  reserve(inputs_, in_bytes, stream, "GPU sampler inputs");
  DI_CUDA_CHECK(
      cudaMemcpyAsync(inputs_.data(), in.data(), in_bytes, cudaMemcpyHostToDevice, stream));

  block_.emplace(n);
  reserve(outputs_, block_->bytes(), stream, "GPU sampler outputs");
  reserve(workspace_, sampler_workspace_bytes(n, vocab), stream, "GPU sampler workspace");
  const auto* base = static_cast<const std::byte*>(inputs_.data());
  SamplerParams p;
  p.logits = logits;
  p.row_params = reinterpret_cast<const SamplerRowParams*>(base);
  p.logits_rows = reinterpret_cast<const int64_t*>(base + params_bytes);
  p.ids = reinterpret_cast<const int64_t*>(base + params_bytes + lrows_bytes);
  p.rows = n;
  p.vocab = vocab;
  p.workspace = workspace_.data();
  block_->bind(p, outputs_.data());
  sample_rows(p, stream);
  host_out_ = host_.allocate(block_->bytes(), 64);
  DI_CUDA_CHECK(cudaMemcpyAsync(host_out_.data(), outputs_.data(), block_->bytes(),
                                cudaMemcpyDeviceToHost, stream));
  return enqueued;
}

std::vector<std::optional<SampleOutcome>> CudaChunkSampler::collect() const {
  std::vector<std::optional<SampleOutcome>> out(num_chunks_);
  for (size_t r = 0; r < row_chunk_.size(); ++r) {
    out[static_cast<size_t>(row_chunk_[r])] =
        block_->row(host_out_, static_cast<int64_t>(r), row_logprobs_[r]);
  }
  return out;
}

}  // namespace di
