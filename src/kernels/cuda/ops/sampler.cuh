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
#include <vector>

#include "deepinfer/sampling_params.h"
#include "kernels/params/dense_ops.h"

namespace di {

// Bytes of SamplerParams::workspace for `rows` rows of `vocab` logits (processed logits, output
// counts and penalty flags: 12 bytes per token and row).
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

// Throws di::Error naming the first row whose status is not kOk.
void check_sampler_status(std::span<const int32_t> status);

}  // namespace di
