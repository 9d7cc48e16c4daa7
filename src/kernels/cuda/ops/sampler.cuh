#pragma once

// The GPU sampler (kernels/params/dense_ops.h): sample_row (sampling/sampler.h) for a batch of
// rows, one CTA per row, with identical token choices. Host-only declarations.
//
// Use: make_sampler_row() per row on the host (appending its id lists to one array), upload the
// rows and ids, then sample_rows(); after the stream reaches it, check_sampler_status() turns a
// row's non-OK status into the di::Error the CPU sampler would have thrown.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "kernels/params/dense_ops.h"
#include "sampling/sampler.h"

namespace di {

// Bytes of SamplerParams::workspace for `rows` rows of `vocab` logits (processed logits, output
// counts and penalty flags: 12 bytes per token and row; then 256 bytes a row for the greedy
// argmax's slice keys).
size_t sampler_workspace_bytes(int64_t rows, int64_t vocab);

// The kernel's view of one row (sampler.h's SamplerRow): appends prompt_ids, output_ids and, when
// suppress_stop_tokens, eos_ids + params.stop_token_ids to `ids` and records their ranges.
// Validates the ranges the CPU sampler checks (position >= 0, logprobs <= 20 and <= vocab).
SamplerRowParams make_sampler_row(const deepinfer::SamplingParams& params, uint64_t seed,
                                  int64_t position, std::span<const int64_t> prompt_ids,
                                  std::span<const int64_t> output_ids,
                                  std::span<const int64_t> eos_ids, bool suppress_stop_tokens,
                                  int64_t vocab, std::vector<int64_t>& ids);

void sample_rows(const SamplerParams& params, cudaStream_t stream);

// What a row's SamplerStatus means (the CPU sampler's error text for the same case).
std::string sampler_status_message(int32_t status);
// Throws di::Error naming the first row whose status is not kOk.
void check_sampler_status(std::span<const int32_t> status);

// The sampler's per-row outputs (tokens, status, logprobs) for `rows` rows packed in one block of
// memory, so that a step allocates one device buffer and copies one range back to the host.
class SamplerOutputBlock {
 public:
  explicit SamplerOutputBlock(int64_t rows);
  size_t bytes() const { return bytes_; }
  // Points the output fields of `p` into `device_block` (bytes() bytes, 16-byte aligned).
  void bind(SamplerParams& p, void* device_block) const;
  // Row r of a host copy of the block; `logprobs` = the row's SamplerRowParams::logprobs (the
  // top-N asked for, -1 = none).
  SampleOutcome row(std::span<const std::byte> host, int64_t r, int32_t logprobs) const;

 private:
  int64_t rows_ = 0;
  size_t tokens_ = 0, token_logprob_ = 0, token_rank_ = 0, top_ids_ = 0, top_logprobs_ = 0,
         status_ = 0, bytes_ = 0;
};

}  // namespace di
