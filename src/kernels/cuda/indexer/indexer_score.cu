// Indexer scores on tensor cores, bitwise equal to cpu::indexer_score<float>:
//   score[r, t] = sum_h w[r, h] * relu(q[r, h] . k_t)   (32 heads x 128 FP4 dims).
//
// Exactness. Every q and k value is e2m1 * 2^e with one UE8M0 exponent per 32 dims, and 2 * e2m1
// is an integer in [-12, 12]. A 32-wide block's dot is therefore S * 2^(eq + ek) / 4 with S the
// exact integer dot from one mma.m16n8k32.s8 (K = 32 = one scale block). The CPU reference sums
// a block sequentially in fp32, which is exact for these inputs, so both hold the same value.
// The accumulator starts at the bits of 1.5 * 2^23 (kMagicBits), so it ends as the fp32 value
// 1.5 * 2^23 + S; fma(that, ks, -1.5 * 2^23 * ks) is S * ks exactly, and fma(S * ks, qs / 4, dot)
// is the reference's dot + block_sum with its one rounding (an FMA of an exact product rounds
// once, like the reference's add). Exact as long as no intermediate leaves the fp32 range, i.e.
// for scale exponents far from +-127, which FP4 quantisation of real activations never
// approaches. Heads are then added in order with __fmul_rn / __fadd_rn (never contracted).
// Rows and keys whose 4 block exponents span <= 3 octaves (the common case) go faster: their
// int8 values are pre-shifted to one exponent (align_blocks) and a head's 4 block dots chained
// in one integer accumulator, which equals the reference because its block additions are then
// all exact; other tiles take the per-block path. Both are bitwise the reference.
//
// The int8 operands come from the nibbles with two byte permutes (magnitude lookup, negated
// lookup) and a sign select. The K order inside the mma is a fixed permutation of the block's 32
// dims, applied to q and k alike (lane t holds dims 8t .. 8t + 7 of each block); an integer sum
// does not depend on it. A query row's A fragments (2 M-tiles x 4 blocks = 32 registers), scales
// and weights are loaded once per warp and CTA.
//
// The ordered head sum: each lane holds relu(dot) * w for heads 4g .. 4g + 3 x keys {2t, 2t+1}
// of every tile (stage_heads: the A rows are permuted so that a lane's rows are consecutive
// heads); they go to a per-warp shared stage [keys][36 floats] as two 16-byte stores a tile
// (stride 36: conflict-free stores and loads), then lane L adds the 32 heads of key L in order
// and stores one coalesced score. In the uniform path relu(dot) * w is computed as
// relu(S * ks) * (qs * w), one rounding like the reference's, where qs * w is exact (a row where
// it is not takes the per-block path).
//
// Work split and key staging: see indexer_score_kernel.
//
// Other widths (IndexerScoreParams::heads / dim, the small test models) go to the generic kernel
// of indexer_score_generic.cu from the one launcher below, after the same validation.

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "common/check.h"
#include "common/fp8.h"
#include "kernels/cuda/indexer/indexer.cuh"
#include "kernels/cuda/indexer/indexer_score_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

using namespace indexer_detail;  // NOLINT(google-build-using-namespace): the shared helpers

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBatchKeys = 32;  // keys per warp batch (4 mma N-tiles)
constexpr int kBlocks = kScoreBlocks;
constexpr int kTileBytes = 144;       // one staged key: 128 int8 + 4 fp32 scales
constexpr int kPrefillRows = kWarps;  // query rows per CTA (prefill)
constexpr int kPrefillStepKeys = 64;  // keys staged per CTA step (prefill)

// Exponent alignment of one 128-dim row (q head or key) with UE8M0 scale bytes `word`: block
// b's int8 values are shifted left by d_b = min(e_b - e_min, 3) and its scale byte lowered to
// e_b - d_b, which leaves every block value (and so the reference's block sums) unchanged.
// `uniform`: the adjusted scales of the 4 blocks are equal (exponent span <= 3), so a head's 4
// block dots can be chained in one integer accumulator: with q and k both uniform, every block
// value is an integer multiple of one power of two and all partial sums stay below 2^21 of it,
// so the reference's sequential fp32 block additions are all exact and equal the integer sum.
struct BlockAlign {
  uint32_t shift[4], byte[4];
  bool uniform;
};
__device__ __forceinline__ BlockAlign align_blocks(uint32_t word) {
  BlockAlign al;
  uint32_t e[4];
#pragma unroll
  for (int b = 0; b < 4; ++b)
    e[b] = (word >> (8 * b)) & 0xFFu;
  const uint32_t lo = min(min(e[0], e[1]), min(e[2], e[3]));
  const uint32_t hi = max(max(e[0], e[1]), max(e[2], e[3]));
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    al.shift[b] = min(e[b] - lo, 3u);
    al.byte[b] = e[b] - al.shift[b];
  }
  al.uniform = hi - lo <= 3u;
  return al;
}

// One query row in registers: the A fragments of M-tile m and block b (register 0/2: head
// 4g + 2m, dims 8t .. 8t + 3 / 8t + 4 .. 8t + 7 of the block; registers 1/3: head 4g + 2m + 1),
// exponent-aligned per head (align_blocks), and for head slot s (head 4g + s, the accumulator
// rows this lane holds: M-tile s / 2, registers s % 2 and s % 2 + 2) the adjusted q scale / 4
// per block, the head weight and qs * w. `uniform`: every head of the row is, and every qs * w
// is exact.
struct QueryRow {
  uint32_t a[2][kBlocks][4];
  float qs[4][kBlocks], w[4], qw[4];
  bool uniform;

  __device__ __forceinline__ void load(const IndexerScoreParams& p, int64_t r, int g, int t) {
    const uint8_t* q = p.q + r * kIndexQueryBytes;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        const uint32_t lo = load_word(q + (4 * g + 2 * m) * kIndexKeyBytes + 16 * b + 4 * t);
        const uint32_t hi = load_word(q + (4 * g + 2 * m + 1) * kIndexKeyBytes + 16 * b + 4 * t);
        a[m][b][0] = e2m1x4_to_s8x4(lo & 0xFFFFu);
        a[m][b][2] = e2m1x4_to_s8x4(lo >> 16);
        a[m][b][1] = e2m1x4_to_s8x4(hi & 0xFFFFu);
        a[m][b][3] = e2m1x4_to_s8x4(hi >> 16);
      }
    }
    bool all_uniform = true;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const BlockAlign al =
          align_blocks(load_word(q + (4 * g + s) * kIndexKeyBytes + kIndexDim / 2));
      const int m = s / 2, reg = s % 2;
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        qs[s][b] = __fmul_rn(scale_from_byte(al.byte[b]), 0.25f);  // exact: a power of two
        a[m][b][reg] = shl_s8x4(a[m][b][reg], al.shift[b]);
        a[m][b][reg + 2] = shl_s8x4(a[m][b][reg + 2], al.shift[b]);
      }
      w[s] = __ldg(p.weights + r * kIndexHeads + 4 * g + s);
      // The uniform path applies qs * w in one multiply: exact when that product is a normal
      // float (qs is a power of two) or w is 0; otherwise the row takes the per-block path.
      qw[s] = __fmul_rn(qs[s][0], w[s]);
      const bool exact = w[s] == 0.0f || (fabsf(qw[s]) >= FLT_MIN && fabsf(qw[s]) <= FLT_MAX);
      all_uniform = all_uniform && al.uniform && exact;
    }
    uniform = __all_sync(0xFFFFFFFFu, all_uniform);
  }

  // One N-tile of 8 keys whose scales are all uniform, for a uniform row: per head one chained
  // integer dot over the 4 blocks (exact), scaled once: (magic + S) * ks - magic * ks is S * ks
  // exactly, times q scale / 4 exactly -- the reference's dot, whose block additions are exact.
  // ks[e]: the (common) scale of key 2t + e. Output as tile().
  __device__ __forceinline__ void tile_uniform(const uint32_t (&b0)[kBlocks],
                                               const uint32_t (&b1)[kBlocks], const float (&ks)[2],
                                               float* stage, int key_row0, int g, int t) const {
    int c[2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int v = 0; v < 4; ++v)
        c[m][v] = kMagicBits;
    }
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
      mma_s8_acc(c[0], a[0][b], b0[b], b1[b]);
      mma_s8_acc(c[1], a[1][b], b0[b], b1[b]);
    }
    stage_uniform_tile(c, ks, qw, stage, key_row0, g, t);  // qs * w exact: checked in load
  }

  // One N-tile of 8 keys: b0/b1[b] the B fragments of block b (key g of the tile), ks[e][b] the
  // scale of key 2t + e. Writes relu(dot) * w of heads 4g .. 4g + 3 x keys {2t, 2t+1} to stage
  // rows key_row0 + 2t + e.
  __device__ __forceinline__ void tile(const uint32_t (&b0)[kBlocks], const uint32_t (&b1)[kBlocks],
                                       const float (&ks)[2][kBlocks], float* stage, int key_row0,
                                       int g, int t) const {
    float nmk[2][kBlocks];  // -magic * k scale: exact
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int b = 0; b < kBlocks; ++b)
        nmk[e][b] = __fmul_rn(-kMagic, ks[e][b]);
    }
    float dot[4][2] = {};
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
      int c[2][4];
      mma_s8(c[0], a[0][b], b0[b], b1[b]);
      mma_s8(c[1], a[1][b], b0[b], b1[b]);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int s = 2 * m + v / 2, e = v % 2;  // c[m][v]: head 4g + s, key 2t + e
          // S * k_scale exactly ((magic + S) * ks - magic * ks: an exact value, rounded once),
          // then dot + that * q_scale / 4 with one rounding of the exact sum: the reference's
          // dot + block_sum.
          const float sk = __fmaf_rn(__int_as_float(c[m][v]), ks[e][b], nmk[e][b]);
          dot[s][e] = __fmaf_rn(sk, qs[s][b], dot[s][e]);
        }
      }
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v[4];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const float d = dot[s][e];
        v[s] = __fmul_rn(d < 0.0f ? 0.0f : d, w[s]);  // std::max(d, 0) * w of the reference
      }
      stage_heads(stage, key_row0 + 2 * t + e, g, v);
    }
  }
};

// The prefill scoring kernel (decode: indexer_score_decode.cu). A CTA of 8 warps serves kRows
// query rows (warp w: row w % kRows) over a chunk of keys_per_cta keys, in steps of kStepKeys
// keys:
//   staging  the CTA loads the step's keys from the page table (256 / kStepKeys threads per key,
//            each 4 * (4 / threads per key) words of codes + its scale bytes) and converts them
//            once into shared memory, per key [lane t: 4 blocks x (b0, b1)] then 4 fp32 scales
//            (144 bytes: the two 16-byte fragment loads of a quarter-warp hit 32 distinct banks);
//            the next step's global loads are issued before the current step is computed, so
//            the loads of the whole CTA overlap its tensor-core work;
//   compute  the warps of a row split the step's keys (kWarpKeys each) and run QueryRow::tile
//            per 8 keys, then the ordered head sum per batch of up to 32 keys.
// 8 rows share each staged key, so keys come from L2/HBM once per 8 rows.
// Rows of different sequences in one CTA are served one sequence after another.
// grid = (ceil(n_cols / keys_per_cta), ceil(rows / kRows)).
__global__ void __launch_bounds__(kThreads)
    indexer_score_kernel(IndexerScoreParams p, int32_t keys_per_cta) {
  constexpr int kRows = kPrefillRows, kStepKeys = kPrefillStepKeys;
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  constexpr int kWarpKeys = kStepKeys * kRows / kWarps;  // keys of one warp per step
  constexpr int kBatch = kWarpKeys < kBatchKeys ? kWarpKeys : kBatchKeys;
  constexpr int kThreadsPerKey = kThreads / kStepKeys;
  constexpr int kBlocksPerThread = kBlocks / kThreadsPerKey;
  static_assert(kWarpKeys % 8 == 0 && kWarpKeys % kBatch == 0 && kThreads % kStepKeys == 0 &&
                kBlocks % kThreadsPerKey == 0);
  __shared__ __align__(16) float stage_all[kWarps][kBatch * kStageStride];
  __shared__ __align__(16) uint8_t keys_sm[kStepKeys * kTileBytes];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int32_t n_cols = static_cast<int32_t>(p.n_cols);
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int n_rows = static_cast<int>(min(static_cast<int64_t>(kRows), p.rows - row0));
  const int64_t r = row0 + warp % kRows;
  const int warp_key0 = (warp / kRows) * kWarpKeys;  // this warp's keys in a step
  const bool active = warp % kRows < n_rows;
  const int32_t chunk0 = static_cast<int32_t>(blockIdx.x) * keys_per_cta;
  const int32_t chunk_end = min(chunk0 + keys_per_cta, n_cols);
  const int32_t my_visible = active ? min(max(__ldg(p.row_visible + r), 0), n_cols) : 0;
  const int32_t my_seq = active ? __ldg(p.row_seq + r) : -1;
  float* out = p.scores + r * p.score_stride;
  float* stage = stage_all[warp];

  QueryRow qr;
  if (active && chunk0 < my_visible) qr.load(p, r, g, t);

  // Staging roles: key tid / kThreadsPerKey of the step, blocks from sb0.
  const int sk = tid / kThreadsPerKey;
  const int sb0 = (tid % kThreadsPerKey) * kBlocksPerThread;
  uint32_t done = 0;  // bit i: row i's sequence served (uniform: every thread computes it)
  for (int first = 0; first < n_rows; ++first) {
    if (done & (1u << first)) continue;
    const int32_t seq = __ldg(p.row_seq + row0 + first);
    int32_t seq_visible = 0;  // keys of `seq` that some row of the CTA sees
    for (int i = first; i < n_rows; ++i) {
      if (__ldg(p.row_seq + row0 + i) == seq) {
        done |= 1u << i;
        seq_visible = max(seq_visible, min(max(__ldg(p.row_visible + row0 + i), 0), n_cols));
      }
    }
    const bool mine = active && my_seq == seq;
    const int32_t end = min(chunk_end, seq_visible);  // keys to stage

    // Key loads are pipelined three steps deep: the page id of step s + 3 is loaded, the entry
    // of step s + 2 prefetched into L2, the words of step s + 1 loaded into registers while
    // step s is computed (one step of registers only: the CTA must stay at 128 registers per
    // thread for 2 CTAs per SM). Keys >= end (past every row's visible count) are never
    // addressed.
    const int32_t* seq_pages = p.keys.pages + static_cast<int64_t>(seq) * p.keys.pages_stride;
    auto page_of = [&](int32_t key) -> int32_t {
      return key < end ? __ldg(seq_pages + key / p.keys.entries_per_page) : 0;
    };
    auto entry_of = [&](int32_t key, int32_t page) {
      return p.keys.pool + static_cast<int64_t>(page) * p.keys.page_bytes +
             static_cast<int64_t>(key % p.keys.entries_per_page) * kIndexKeyBytes;
    };
    uint32_t words[kBlocksPerThread][4], sbytes = 0u;
    auto fetch = [&](int32_t key, int32_t page) {
      const bool live = key < end;
      const uint8_t* e = entry_of(key, page);
#pragma unroll
      for (int j = 0; j < kBlocksPerThread; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          words[j][i] = live ? load_word(e + 16 * (sb0 + j) + 4 * i) : 0u;
      }
      sbytes = live ? load_word(e + kIndexDim / 2) : 0u;
    };
    auto prefetch_l2 = [&](int32_t key, int32_t page) {
      if (key < end) {
        const uint8_t* e = entry_of(key, page);
        asm volatile("prefetch.global.L2 [%0];" ::"l"(e + 16 * sb0));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(e + kIndexDim / 2));
      }
    };
    int32_t page_next = page_of(chunk0 + kStepKeys + sk);       // step s + 1
    int32_t page_after = page_of(chunk0 + 2 * kStepKeys + sk);  // step s + 2
    fetch(chunk0 + sk, page_of(chunk0 + sk));
    prefetch_l2(chunk0 + kStepKeys + sk, page_next);
    for (int32_t step0 = chunk0; step0 < end; step0 += kStepKeys) {
      // Word i of block b holds dims 8i .. 8i + 7 of the block: lane t = i's fragment pair.
      uint8_t* dst = keys_sm + sk * kTileBytes;
      // align_blocks for this thread's blocks (b is not a compile-time index here).
      const uint32_t e_lo = min(min(sbytes & 0xFFu, (sbytes >> 8) & 0xFFu),
                                min((sbytes >> 16) & 0xFFu, sbytes >> 24));
      const uint32_t e_hi = max(max(sbytes & 0xFFu, (sbytes >> 8) & 0xFFu),
                                max((sbytes >> 16) & 0xFFu, sbytes >> 24));
#pragma unroll
      for (int j = 0; j < kBlocksPerThread; ++j) {
        const int b = sb0 + j;
        const uint32_t e_b = (sbytes >> (8 * b)) & 0xFFu;
        const uint32_t shift = min(e_b - e_lo, 3u);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          *reinterpret_cast<uint2*>(dst + 32 * i + 8 * b) =
              make_uint2(shl_s8x4(e2m1x4_to_s8x4(words[j][i] & 0xFFFFu), shift),
                         shl_s8x4(e2m1x4_to_s8x4(words[j][i] >> 16), shift));
        }
        // The sign of block 0's scale flags a key whose blocks are not uniform.
        const float sc = scale_from_byte(e_b - shift);
        reinterpret_cast<float*>(dst + 128)[b] = (b == 0 && e_hi - e_lo > 3u) ? -sc : sc;
      }
      __syncthreads();
      fetch(step0 + kStepKeys + sk, page_next);
      prefetch_l2(step0 + 2 * kStepKeys + sk, page_after);
      page_next = page_after;
      page_after = page_of(step0 + 3 * kStepKeys + sk);
      if (mine && step0 + warp_key0 < my_visible) {
#pragma unroll 1
        for (int h = 0; h < kWarpKeys / kBatch; ++h) {
          const int kb = warp_key0 + h * kBatch;  // first key of the batch in the step
          const int32_t key0 = step0 + kb;
          if (key0 >= chunk_end) break;
#pragma unroll
          for (int i = 0; i < kBatch / 8; ++i) {
            const int kl = kb + 8 * i;  // first key of the tile in the step
            const uint4* frag =
                reinterpret_cast<const uint4*>(keys_sm + (kl + g) * kTileBytes + 32 * t);
            const uint4 f0 = frag[0], f1 = frag[1];
            const uint32_t b0[kBlocks] = {f0.x, f0.z, f1.x, f1.z};
            const uint32_t b1[kBlocks] = {f0.y, f0.w, f1.y, f1.w};
            const float4 s0 =
                *reinterpret_cast<const float4*>(keys_sm + (kl + 2 * t) * kTileBytes + 128);
            const float4 s1 =
                *reinterpret_cast<const float4*>(keys_sm + (kl + 2 * t + 1) * kTileBytes + 128);
            // The uniform path when the row and all 8 keys of the tile allow it (warp-uniform).
            if (qr.uniform && __all_sync(0xFFFFFFFFu, s0.x > 0.0f && s1.x > 0.0f)) {
              const float ks[2] = {s0.x, s1.x};
              qr.tile_uniform(b0, b1, ks, stage, 8 * i, g, t);
            } else {
              const float ks[2][kBlocks] = {{fabsf(s0.x), s0.y, s0.z, s0.w},
                                            {fabsf(s1.x), s1.y, s1.z, s1.w}};
              qr.tile(b0, b1, ks, stage, 8 * i, g, t);
            }
          }
          __syncwarp();
          if (lane < kBatch) {
            const float score = head_sum(stage, lane);
            const int32_t key = key0 + lane;
            if (key < chunk_end) out[key] = key < my_visible ? score : neg_inf();
          }
          __syncwarp();  // the stage is rewritten by the next batch
        }
      }
      __syncthreads();  // keys_sm is rewritten by the next step
    }
  }
  // The row's keys of the chunk past its visible count (never scored for it): -inf. One warp
  // of the row writes them.
  if (active && warp < kRows) {
    const int32_t from = max(chunk0, min(my_visible, chunk_end));
    for (int32_t key = from + lane; key < chunk_end; key += 32)
      out[key] = neg_inf();
  }
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

}  // namespace

void indexer_score(const IndexerScoreParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.n_cols >= 0 && p.n_cols < (int64_t{1} << 30),
           "indexer_score: bad sizes (rows={}, n_cols={})", p.rows, p.n_cols);
  DI_CHECK(p.heads >= 1 && p.dim > 0 && p.dim % kIndexScaleBlock == 0 &&
               static_cast<int64_t>(p.heads) * (p.dim + 1) <= kIndexerGenericMaxFloats,
           "indexer_score: heads {} x dim {} (dim a positive multiple of {}, heads * (dim + 1) "
           "<= {})",
           p.heads, p.dim, kIndexScaleBlock, kIndexerGenericMaxFloats);
  const bool production = p.heads == kIndexHeads && p.dim == kIndexDim;
  DI_CHECK(p.score_stride >= p.n_cols, "indexer_score: score_stride {} < n_cols {}", p.score_stride,
           p.n_cols);
  if (p.rows == 0 || p.n_cols == 0) return;
  DI_CHECK(p.q != nullptr && p.weights != nullptr && p.row_seq != nullptr &&
               p.row_visible != nullptr && p.scores != nullptr && p.keys.pool != nullptr &&
               p.keys.pages != nullptr,
           "indexer_score: null pointer (rows={}, n_cols={})", p.rows, p.n_cols);
  DI_CHECK(
      p.keys.entry_bytes == index_key_bytes(p.dim) && p.keys.entries_per_page > 0 &&
          p.keys.page_bytes >= static_cast<int64_t>(p.keys.entries_per_page) * p.keys.entry_bytes &&
          p.keys.page_bytes % 4 == 0 && p.keys.pages_stride > 0,
      "indexer_score: bad key table (entry_bytes={}, entries_per_page={}, page_bytes={}, "
      "pages_stride={})",
      p.keys.entry_bytes, p.keys.entries_per_page, p.keys.page_bytes, p.keys.pages_stride);
  DI_CHECK(aligned(p.q, 4) && aligned(p.keys.pool, 4),
           "indexer_score: q and the key pool must be 4-byte aligned");
  if (!production) {
    DI_CHECK(p.rows <= 65535, "indexer_score: {} rows is too many for one launch", p.rows);
    indexer_detail::indexer_score_generic(p, stream);
    return;
  }
  if (!(p.rows_share_keys && p.rows >= kPrefillRows)) {
    indexer_detail::indexer_score_decode(p, stream);
    return;
  }
  // Work split (host plan; a score never depends on it). Prefill (rows sharing keys, at least 8
  // of them): 8 rows per CTA share each staged key; 1,024 keys per CTA.
  constexpr int64_t kKeysPerCta = 1024;
  const int64_t row_groups = (p.rows + kPrefillRows - 1) / kPrefillRows;
  DI_CHECK(row_groups <= 65535, "indexer_score: {} rows is too many for one launch", p.rows);
  const dim3 grid(static_cast<unsigned>((p.n_cols + kKeysPerCta - 1) / kKeysPerCta),
                  static_cast<unsigned>(row_groups));
  cuda_detail::launch_pdl(indexer_score_kernel, grid, kThreads, 0, stream, p,
                          static_cast<int32_t>(kKeysPerCta));
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
