#pragma once

// CUDA launcher of the LM head (bf16 weights x fp32 rows -> fp32 logits,
// kernels/params/dense_ops.h). Host-only declaration; validates, never allocates or synchronizes.

#include <cuda_runtime_api.h>

#include "kernels/params/dense_ops.h"

namespace di {

void lm_head(const LmHeadParams& params, cudaStream_t stream);

// The tensor-core head (lm_head_tc.cu): x split into exact bf16 pieces, fixed MMA order, rows
// bitwise batch-invariant; dim % 64 == 0. Not yet run on a GPU and not dispatched by lm_head:
// its parity test decides (see the file's header).
void lm_head_tensor_core(const LmHeadParams& params, cudaStream_t stream);

namespace lm_head_detail {
// The checks both launchers share (shape, logits stride, x precision, pointers when rows > 0),
// naming `op`; returns the logits row stride.
int64_t checked_stride(const char* op, const LmHeadParams& params);
}  // namespace lm_head_detail

}  // namespace di
