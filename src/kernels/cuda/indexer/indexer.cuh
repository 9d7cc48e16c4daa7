#pragma once

// CUDA launchers of the lightning-indexer ops (kernels/params/indexer.h). Host-only declarations:
// safe to include from .cc files. Launchers validate their Params (di::Error naming the op and
// the sizes), never allocate and never synchronize; a launch failure throws via DI_CUDA_CHECK.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/params/indexer.h"

namespace di {

// FP4 q.k scores with ReLU and per-head weights, bitwise equal to cpu::indexer_score<float>.
// 32 x 128: the tensor-core kernel; other heads x dim: a generic kernel (one thread per key).
void indexer_score(const IndexerScoreParams& params, cudaStream_t stream);

// The query heads packed as FP4 / UE8M0-32 rows, bytes identical to cpu::pack_index_key.
void index_query_pack(const IndexQueryPackParams& params, cudaStream_t stream);

// Per-row top-k with the lower-index tie-break, sorted by position, -1 padded.
void indexer_topk(const IndexerTopkParams& params, cudaStream_t stream);

// Bytes of IndexerCandidateParams::workspace for `rows` rows of `n` positions.
size_t indexer_candidates_workspace_bytes(int64_t rows, int64_t n, int block_size, int topk_blocks);

// Layer-20 candidate pool -> mask (three launches: block max, block top-k, mask expansion).
void indexer_candidates(const IndexerCandidateParams& params, cudaStream_t stream);

// Reindex layers: -inf outside the candidate pool.
void indexer_apply_mask(const IndexerMaskParams& params, cudaStream_t stream);

namespace indexer_detail {
// indexer_score's generic-width kernel (indexer_score_generic.cu); called by indexer_score after
// it validated the Params, never directly.
void indexer_score_generic(const IndexerScoreParams& params, cudaStream_t stream);
// indexer_score's decode kernel for 32 x 128 (indexer_score_decode.cu), likewise.
void indexer_score_decode(const IndexerScoreParams& params, cudaStream_t stream);
}  // namespace indexer_detail

}  // namespace di
