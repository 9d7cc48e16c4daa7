#pragma once

// CUDA launcher of the LM head (bf16 weights x fp32 rows -> fp32 logits,
// kernels/params/dense_ops.h). Host-only declaration; validates, never allocates or synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/dense_ops.h"

namespace di {

// The one dispatch point. The choice depends on the head's shape and the activation precision,
// never on the row count, so a head's rows stay bitwise batch-invariant:
// - bf16 activations against a large head (vocab >= kLmHeadTensorCoreMinVocab, dim % 64 == 0:
//   the vocabulary heads): the tensor-core kernel. H200, vocab 129,280 x 5120: 349 / 353 / 473
//   us at M = 1 / 4 / 64 against the CUDA-core kernels' 299 / 437 / 5,319 us.
// - otherwise (fp32 activations, whose IEEE-order fp32 sums meet the fp32 fixtures' rule; the
//   routers and the compressor / indexer projections): the CUDA-core kernels; among them the
//   heads of vocab <= kLmHeadKSplitMaxVocab with dim % 256 == 0 (routers, compressor and indexer
//   projections) split dim over a CTA's warps (one summation order per dim, whatever M).
void lm_head(const LmHeadParams& params, cudaStream_t stream);
inline constexpr int64_t kLmHeadTensorCoreMinVocab = 16384;
inline constexpr int64_t kLmHeadTensorCoreDimMultiple = 64;
inline constexpr int64_t kLmHeadKSplitMaxVocab = 4096;
bool lm_head_uses_tensor_cores(const LmHeadParams& params);

// The CUDA-core kernels: fp32 FMA chains, k ascending per lane, a fixed warp reduction.
void lm_head_cuda_core(const LmHeadParams& params, cudaStream_t stream);

// The tensor-core kernel (lm_head_tc.cu): x split into exact bf16 pieces, fixed MMA order, rows
// bitwise batch-invariant; dim % 64 == 0. Every product is exact; the MMA's fp32 accumulation
// truncates, so it sums less accurately than the CUDA-core kernels (H200: normwise 1.7e-5
// against cpu::linear<float> at dim 5120, fp32 x; the CUDA-core kernels stay under 2e-6).
void lm_head_tensor_core(const LmHeadParams& params, cudaStream_t stream);

namespace lm_head_detail {
// The checks both launchers share (shape, logits stride, x precision, pointers when rows > 0),
// naming `op`; returns the logits row stride.
int64_t checked_stride(const char* op, const LmHeadParams& params);
}  // namespace lm_head_detail

}  // namespace di
