// Indexer scores for decode (one query row per sequence, 32 heads x 128 FP4 dims), bitwise equal
// to cpu::indexer_score<float>, on int8 tensor cores. The exactness argument (integer block dots,
// the magic-number conversion, the chained "uniform" dot when a row's and a key's block exponents
// span <= 3 octaves) is the one of indexer_score.cu's header. Here no key is shared between rows,
// so every key is converted once per row and the kernel is bound by its instruction count per
// (row, key) (docs/design/cuda_attention.md, "Indexer decode scoring: the instruction budget").
// What makes it cheap:
//
// * Keys straight to registers. Lane (g, t) of a warp loads key g of an 8-key N-tile: the 4 code
//   words of scale block t and the key's scale word (no shared-memory staging, no CTA barrier).
//   Each warp owns 32-key batches of its CTA's chunk; the next tile's words are loaded before the
//   current tile is computed, the batch two ahead is prefetched into L2 (its page ids loaded a
//   batch earlier still), and the first keys are requested before the query row is set up.
//
// * Two table lookups per 4 codes. A key code c (sign s, magnitude index m) becomes two int8
//   operands P and N with P + N = 2 * e2m1(c) << d: P = prmt(TP_d, c) (m > 0: (mag << d) + 1; a
//   negative code selects the sign of a positive byte: 0) and N = prmt(TN_d, c ^ 8) (negative
//   code: -(mag << d); positive code: the sign of -(mag << d), i.e. -1 for m > 0 and 0 for m =
//   0, which the + 1 of P cancels). The P and N mmas take the same query fragments (a P chain
//   and an N chain per M-tile, four independent chains of 4, added as integers at the end), so
//   the signed key is never formed. d (the exponent alignment of the lane's block, 0 .. 3)
//   selects the tables (64 bytes of shared memory; indexer_operands.h).
//
// * The K order is free within the uniform dot (all 128 dims are one integer sum), so "mma j"
//   takes word j of every block: lane t supplies block t, which has one alignment shift per lane
//   and key. The query fragments are built in the same order once per warp.
//
// * Heads 4g .. 4g + 3 in lane g's accumulator rows (A row R of M-tile m is head 4 (R % 8) + 2 m
//   + R / 8), so a lane's 8 outputs per tile are two float4 stores into the head-sum stage.
//
// * relu(dot) * w as relu(S * ks) * (qs * w): qs is a power of two and qs * w is exact when it
//   is a normal float (checked per row), so the product rounds once like the reference's.
//
// Rows whose heads are not all uniform (or whose qs * w would be inexact) and tiles holding a
// non-uniform key take the per-block path: the key's words reloaded in the block layout (lane t
// holds word t of each block; from L1), the row's unshifted block-layout fragments, q scales
// and weights from shared memory, one chained P/N dot per block and the reference's fp32 block
// additions (as indexer_score.cu's QueryRow::tile).

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "common/check.h"
#include "common/fast_div.h"
#include "kernels/cuda/indexer/indexer.cuh"
#include "kernels/cuda/indexer/indexer_operands.h"
#include "kernels/cuda/indexer/indexer_score_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

using namespace indexer_detail;  // NOLINT(google-build-using-namespace): the shared helpers

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBatchKeys = 32;                      // keys per warp batch: 4 tiles, one head sum
constexpr int kTiles = kBatchKeys / 8;              // N-tiles of 8 keys per batch
constexpr int kCtaBatchKeys = kWarps * kBatchKeys;  // keys of one batch round of the CTA
constexpr int kRowStride = 52;  // words per lane in the per-block row data (conflict-free)

// The d = 0 tables (the per-block path, unshifted): P = {0, 2, 3, 4 | 5, 7, 9, 13},
// N = {0, -1, -2, -3 | -4, -6, -8, -12} (indexer_operands.h).
constexpr uint32_t kP0Lo = pn_table_word(0, 0), kP0Hi = pn_table_word(0, 1);
constexpr uint32_t kN0Lo = pn_table_word(0, 2), kN0Hi = pn_table_word(0, 3);

// The four P / N operand words of one code word (8 codes: dims 8 .. 8 + 7 of a word, element i
// in nibble i): lo / hi = elements 0..3 / 4..7.
struct Operands {
  uint32_t p_lo, p_hi, n_lo, n_hi;
};
__device__ __forceinline__ Operands operands(uint32_t w, uint4 table) {
  const uint32_t hi = w >> 16;
  return {prmt(table.x, table.y, w), prmt(table.x, table.y, hi),
          prmt(table.z, table.w, w ^ 0x8888u), prmt(table.z, table.w, hi ^ 0x8888u)};
}

// Byte i of a word, zero-extended: one prmt (selector 0x444i: byte i, then zero bytes of b = 0).
__device__ __forceinline__ uint32_t byte_of(uint32_t word, uint32_t i) {
  return prmt(word, 0u, 0x4440u | i);
}

// Exponent bytes of a scale word: the lowest and the highest.
struct Exponents {
  uint32_t lo, hi;
};
__device__ __forceinline__ Exponents exponents(uint32_t word) {
  const uint32_t e0 = word & 0xFFu, e1 = byte_of(word, 1), e2 = byte_of(word, 2), e3 = word >> 24;
  return {min(min(e0, e1), min(e2, e3)), max(max(e0, e1), max(e2, e3))};
}

// One key as lane (g, t) loads it: the 4 code words of block t, the scale word, the entry.
struct KeyWords {
  uint32_t w[4];
  uint32_t scale;
  const uint8_t* entry;
};

// Per-lane row data of the per-block path in shared memory (lane (g, t), kRowStride words):
// [0, 32) the unshifted A fragments of block layout, index (m * 4 + b) * 4 + reg (reg 0 / 1:
// heads 4g + 2m / + 1, dims 8t .. 8t + 3 of block b; 2 / 3: dims 8t + 4 .. 8t + 7);
// [32, 48) q scale / 4 of head 4g + s, block b at 32 + 4s + b; [48, 52) the weight of head 4g + s.
struct RowShared {
  uint32_t words[32 * kRowStride];
};

__global__ void __launch_bounds__(kThreads, 2)
    indexer_score_decode_kernel(IndexerScoreParams p, int32_t keys_per_cta, FastDivU31 per_page) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ __align__(16) float stage_all[kWarps][kBatchKeys * kStageStride];
  __shared__ __align__(16) RowShared row_sm;
  __shared__ __align__(16) uint4 tables[4];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t r = blockIdx.y;
  const int32_t n_cols = static_cast<int32_t>(p.n_cols);
  const int32_t chunk0 = static_cast<int32_t>(blockIdx.x) * keys_per_cta;
  const int32_t chunk_end = min(chunk0 + keys_per_cta, n_cols);
  const int32_t visible = min(max(__ldg(p.row_visible + r), 0), n_cols);
  const int32_t end = min(chunk_end, visible);  // keys scored; [end, chunk_end) get -inf
  float* out = p.scores + r * p.score_stride;
  if (chunk0 >= end) {  // CTA-uniform: nothing to score in this chunk
    for (int32_t key = chunk0 + tid; key < chunk_end; key += kThreads)
      out[key] = neg_inf();
    return;
  }
  if (tid < 16) {
    reinterpret_cast<uint32_t*>(tables)[tid] = pn_table_word(tid / 4, tid % 4);
  }

  const int32_t* seq_pages =
      p.keys.pages + static_cast<int64_t>(__ldg(p.row_seq + r)) * p.keys.pages_stride;
  // The entry of a key in two halves, so that the page id's load is issued a batch before the
  // address is needed: page_ref loads it (slot -1: past the scored keys), entry_at forms the
  // address. Past the scored keys (whose page ids may be anything) the pool's first entry stands
  // in: its words are loaded and scored like any key's (no predicated loads, no zeroing) and
  // those scores are never stored.
  struct PageRef {
    int32_t page, slot;
  };
  auto page_ref = [&](int32_t key) -> PageRef {
    if (key >= end) return {0, -1};
    const uint32_t page_index = per_page.div(static_cast<uint32_t>(key));
    return {__ldg(seq_pages + page_index),
            key - static_cast<int32_t>(page_index) * p.keys.entries_per_page};
  };
  auto entry_at = [&](PageRef ref) -> const uint8_t* {
    if (ref.slot < 0) return p.keys.pool;
    return p.keys.pool + static_cast<int64_t>(ref.page) * p.keys.page_bytes +
           static_cast<int64_t>(ref.slot) * kIndexKeyBytes;
  };
  // Lane (g, t)'s words of the key whose entry lane `src` of `entries` holds.
  auto fetch = [&](const uint8_t* entries, int src) {
    KeyWords k;
    k.entry = reinterpret_cast<const uint8_t*>(
        __shfl_sync(0xFFFFFFFFu, reinterpret_cast<uintptr_t>(entries), src));
#pragma unroll
    for (int j = 0; j < 4; ++j)
      k.w[j] = load_word(k.entry + 16 * t + 4 * j);
    k.scale = load_word(k.entry + kIndexDim / 2);
    return k;
  };
  auto batch_key0 = [&](int i) { return chunk0 + (i * kWarps + warp) * kBatchKeys; };

  // The first keys are requested before the query row is set up (they do not depend on it).
  // Lane L holds the entries of key L of this warp's current and next batch and the page id of
  // the batch after that; when a batch starts, that batch is prefetched into L2 and the page id
  // of the one after it is loaded. Each tile's words are loaded while the tile before it is
  // computed.
  float* stage = stage_all[warp];
  const uint8_t* entries = entry_at(page_ref(batch_key0(0) + lane));
  const uint8_t* entries_next = entry_at(page_ref(batch_key0(1) + lane));
  PageRef ref_after = page_ref(batch_key0(2) + lane);
  asm volatile("prefetch.global.L2 [%0];" ::"l"(entries_next));
  KeyWords next = fetch(entries, g), next2 = fetch(entries, 8 + g);

  // The query row: uniform-layout fragments (shifted per head) in registers, block-layout data
  // for the per-block path in shared memory (warp 0).
  const uint8_t* q = p.q + r * kIndexQueryBytes;
  uint32_t a[2][4][4];  // [M-tile][word j][reg]
  float qw[4];          // qs * w of head 4g + s
  bool fast = true;
  uint32_t* my_row = row_sm.words + lane * kRowStride;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int h = 4 * g + s, m = s / 2, reg = s % 2;
    const uint8_t* qh = q + h * kIndexKeyBytes;
    const uint32_t sw = load_word(qh + kIndexDim / 2);
    const Exponents ex = exponents(sw);
    const uint32_t d = min(byte_of(sw, t) - ex.lo, 3u);
    const float w = __ldg(p.weights + r * kIndexHeads + h);
    const float qs = __fmul_rn(scale_from_byte(ex.lo), 0.25f);  // exact: a power of two
    qw[s] = __fmul_rn(qs, w);
    // qs * w is exact when it is normal (qs a power of two) or w is 0.
    const bool exact = w == 0.0f || (fabsf(qw[s]) >= FLT_MIN && fabsf(qw[s]) <= FLT_MAX);
    fast = fast && ex.hi - ex.lo <= 3u && exact;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = load_word(qh + 16 * t + 4 * j);
      a[m][j][reg] = shl_s8x4(e2m1x4_to_s8x4(word & 0xFFFFu), d);
      a[m][j][reg + 2] = shl_s8x4(e2m1x4_to_s8x4(word >> 16), d);
    }
    if (warp == 0) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const uint32_t word = load_word(qh + 16 * b + 4 * t);
        my_row[(m * 4 + b) * 4 + reg] = e2m1x4_to_s8x4(word & 0xFFFFu);
        my_row[(m * 4 + b) * 4 + reg + 2] = e2m1x4_to_s8x4(word >> 16);
        my_row[32 + 4 * s + b] =
            __float_as_uint(__fmul_rn(scale_from_byte((sw >> (8 * b)) & 0xFFu), 0.25f));
      }
      my_row[48 + s] = __float_as_uint(w);
    }
  }
  fast = __all_sync(0xFFFFFFFFu, fast);
  __syncthreads();  // tables and row_sm

  for (int i = 0;; ++i) {
    const int32_t key0 = batch_key0(i);
    if (key0 >= chunk_end) break;
    if (key0 < end) {
      const uint8_t* entries_after = entry_at(ref_after);
      asm volatile("prefetch.global.L2 [%0];" ::"l"(entries_after));
      ref_after = page_ref(batch_key0(i + 3) + lane);
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) {
        const KeyWords cur = next;
        next = next2;
        next2 = tile + 2 < kTiles ? fetch(entries, 8 * (tile + 2) + g)
                                  : fetch(entries_next, 8 * (tile + 2 - kTiles) + g);
        const Exponents ex = exponents(cur.scale);
        if (fast && __all_sync(0xFFFFFFFFu, ex.hi - ex.lo <= 3u)) {
          const uint32_t d = min(byte_of(cur.scale, t) - ex.lo, 3u);
          const uint4 table = tables[d];
          const float ks_mine = scale_from_byte(ex.lo);
          const float ks[2] = {__shfl_sync(0xFFFFFFFFu, ks_mine, 8 * t),
                               __shfl_sync(0xFFFFFFFFu, ks_mine, 8 * t + 4)};
          // Four independent chains of 4 MMAs (M-tile x P / N), added at the end: half the
          // dependent depth of one P / N chain per M-tile. cp starts at the magic bits, cn at 0,
          // so cp + cn is magic + S (integer sums: exact in any order).
          int cp[2][4], cn[2][4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const Operands o = operands(cur.w[j], table);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              if (j == 0) {
                mma_s8(cp[m], a[m][j], o.p_lo, o.p_hi);
                mma_s8(cn[m], a[m][j], o.n_lo, o.n_hi, 0);
              } else {
                mma_s8_acc(cp[m], a[m][j], o.p_lo, o.p_hi);
                mma_s8_acc(cn[m], a[m][j], o.n_lo, o.n_hi);
              }
            }
          }
          int c[2][4];
#pragma unroll
          for (int m = 0; m < 2; ++m) {
#pragma unroll
            for (int v = 0; v < 4; ++v)
              c[m][v] = cp[m][v] + cn[m][v];
          }
          stage_uniform_tile(c, ks, qw, stage, 8 * tile, g, t);
        } else {
          // The per-block path. Lane t: word t of each block of key g.
          uint32_t wb[4];
#pragma unroll
          for (int b = 0; b < 4; ++b)
            wb[b] = load_word(cur.entry + 16 * b + 4 * t);
          const uint32_t sw[2] = {__shfl_sync(0xFFFFFFFFu, cur.scale, 8 * t),
                                  __shfl_sync(0xFFFFFFFFu, cur.scale, 8 * t + 4)};
          float dot[4][2] = {};
#pragma unroll 1
          for (int b = 0; b < 4; ++b) {
            const Operands o = operands(wb[b], make_uint4(kP0Lo, kP0Hi, kN0Lo, kN0Hi));
            const uint4 a0 = *reinterpret_cast<const uint4*>(my_row + b * 4);
            const uint4 a1 = *reinterpret_cast<const uint4*>(my_row + 16 + b * 4);
            const uint32_t am[2][4] = {{a0.x, a0.y, a0.z, a0.w}, {a1.x, a1.y, a1.z, a1.w}};
            int c[2][4];
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              mma_s8(c[m], am[m], o.p_lo, o.p_hi);
              mma_s8_acc(c[m], am[m], o.n_lo, o.n_hi);
            }
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float ks = scale_from_byte((sw[e] >> (8 * b)) & 0xFFu);
              const float nmk = __fmul_rn(-kMagic, ks);
#pragma unroll
              for (int s = 0; s < 4; ++s) {
                // S_b * ks exactly, then dot + that * qs / 4 rounded once: the reference's
                // dot + block_sum.
                const float sk = __fmaf_rn(__int_as_float(c[s / 2][2 * (s % 2) + e]), ks, nmk);
                dot[s][e] = __fmaf_rn(sk, __uint_as_float(my_row[32 + 4 * s + b]), dot[s][e]);
              }
            }
          }
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v[4];
#pragma unroll
            for (int s = 0; s < 4; ++s) {
              const float d = dot[s][e];
              v[s] =
                  __fmul_rn(d < 0.0f ? 0.0f : d, __uint_as_float(my_row[48 + s]));  // max(d, 0) * w
            }
            stage_heads(stage, 8 * tile + 2 * t + e, g, v);
          }
        }
      }
      __syncwarp();
      const int32_t key = key0 + lane;
      if (key < chunk_end) out[key] = key < visible ? head_sum(stage, lane) : neg_inf();
      __syncwarp();  // the stage is rewritten by the next batch
      entries = entries_next;
      entries_next = entries_after;
    } else {
      const int32_t key = key0 + lane;
      if (key < chunk_end) out[key] = neg_inf();
    }
  }
}

}  // namespace

namespace indexer_detail {

void indexer_score_decode(const IndexerScoreParams& p, cudaStream_t stream) {
  // Work split (a score never depends on it): one row per CTA row, keys_per_cta a multiple of
  // the CTA's batch round, sized so that the grid is about 2 CTAs per SM (2 fit by registers and
  // shared memory), between one round and 64 rounds.
  const int64_t target_ctas = 2 * static_cast<int64_t>(current_sm_count());
  const int64_t per_row = std::max<int64_t>(1, target_ctas / p.rows);
  int64_t keys_per_cta = (p.n_cols + per_row - 1) / per_row;
  keys_per_cta =
      std::clamp<int64_t>((keys_per_cta + kCtaBatchKeys - 1) / kCtaBatchKeys * kCtaBatchKeys,
                          kCtaBatchKeys, 64 * kCtaBatchKeys);
  DI_CHECK(p.rows <= 65535, "indexer_score: {} decode rows is too many for one launch", p.rows);
  const dim3 grid(static_cast<unsigned>((p.n_cols + keys_per_cta - 1) / keys_per_cta),
                  static_cast<unsigned>(p.rows));
  cuda_detail::launch_pdl(indexer_score_decode_kernel, grid, kThreads, 0, stream, p,
                          static_cast<int32_t>(keys_per_cta),
                          FastDivU31(static_cast<uint32_t>(p.keys.entries_per_page)));
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace indexer_detail
}  // namespace di
