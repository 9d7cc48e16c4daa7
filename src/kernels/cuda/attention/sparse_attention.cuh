#pragma once

// CUDA launcher of the CSA2 sparse attention (kernels/params/sparse_attention.h). Host-only
// declarations; the launcher validates the params (di::Error naming the field), never allocates
// or synchronizes.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/params/sparse_attention.h"

namespace di {

// out = inverse_rope(sparse attention of q over the window and the selected compressed entries).
// Positions >= chunk_start[row] must be present in chunk_kv (when chunk_kv is null every window
// position must be < chunk_start, i.e. already in the ring).
// 64 heads x 512 run the tensor-core kernel, other dims the generic one (params header).
void sparse_attention(const SparseAttnParams& params, cudaStream_t stream);

namespace attention_detail {

// The dimension-generic kernel (sparse_attention_generic.cu), launched by sparse_attention() once
// the params are validated; not an entry point of its own.
void launch_sparse_attention_generic(const SparseAttnParams& params, cudaStream_t stream);

// The wgmma kernel (sparse_attention_wgmma.cu, bf16 precision, sm_90a), likewise launched by
// sparse_attention(); `chunks` CTAs per row.
void launch_sparse_attention_wgmma(const SparseAttnParams& params, int chunks, cudaStream_t stream);

// Test probe of the wgmma kernel's tile products (sparse_attention_wgmma.cu), one CTA on device
// arrays of bf16 bits: s_out [64][64] = q [64][512] kv^T ([64][512]) and o_out [64][512] =
// bf16(s_out) kv, fp32, through the kernel's own operand layout, descriptors and fragment maps.
void wgmma_tile_probe(const uint16_t* q, const uint16_t* kv, float* s_out, float* o_out,
                      cudaStream_t stream);

}  // namespace attention_detail

}  // namespace di
