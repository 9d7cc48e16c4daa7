// Per-row top-k of the indexer (cpu::select_topk semantics), the layer-20 candidate pool
// (cpu::candidate_pool) and the Reindex mask (cpu::apply_candidate_mask).
//
// Top-k: radix select on the order-preserving unsigned key of the fp32 bits (-0 folded onto +0,
// since the reference compares values: -0 == +0 is a tie). -inf never survives the reference's
// selection, so -inf keys are left out of every count; with them gone, "the best min(k, n), then
// drop -inf" is "the best k_eff = min(k, n) finite values, or all of them when fewer". Finite
// values at positions >= visible take part and are dropped afterwards, as in the reference. The
// selection is exact, so how a row is split over CTAs changes no output bit (rows stay
// batch-invariant whatever the launch shape).
//
// Sliced kernel (rows up to kSliceMax * 8 positions; chosen for few rows: plan_topk): a cluster
// of C = 1, 2, 4 or 8 CTAs per row; CTA r copies its contiguous slice of the row into shared
// memory (cp.async: the row's only global read).
//   1. Each CTA histograms the top 12 key bits of its slice; CTA r sums bins [r 4096 / C, ...)
//      over the cluster (distributed shared memory) and every CTA gathers the summed histogram ->
//      the bin B1 holding the k_eff-th largest value, and how many lie above it (the same numbers
//      in every CTA).
//   2. If the elements at or above B1 fit the shared list (3,840 entries, the common case: B1 is
//      1/4,096 of the value range), each CTA compacts its own (key, index) pairs at or above B1
//      in position order, and CTA 0 appends the other CTAs' lists in rank order: the row's
//      candidates in position order. Otherwise (many equal values) CTA 0 runs the whole-row path
//      below on the global row.
//   3. CTA 0: histograms of key bits 10..19 and 0..9 of the list's elements in B1 -> the exact
//      threshold key T, and need_eq = k_eff - #(key > T), the number of elements equal to T to
//      take: the lowest positions first, the reference's tie-break.
//   4. CTA 0: emission in position order: an element is selected iff key > T, or key == T and
//      fewer than need_eq elements equal to T precede it (a CTA prefix count); selected elements
//      at positions < visible are written at their prefix-count slot, so the output comes out
//      sorted with no sort; the tail of the k_eff slots gets -1.
// Whole-row kernel (many rows, longer rows; its passes are also the sliced kernel's many-ties
// fallback): one CTA per row reads the row from global memory for the histogram and for the
// compaction (or, with many ties, for every pass).
//
// Cached kernel (many rows up to 73,728 positions where it keeps the residency, or from ~56K
// positions at any row count: plan_topk): one CTA per row reads the row once (its prefetching
// variant one chunk ahead), keeping a 16-bit key per position in shared memory; the threshold
// bin's positions are listed and their full keys re-read; emission from a per-row position
// bitmap.
//
// Candidate pool: block max over the row (with the newest visible block pinned to +inf) into the
// workspace, the same top-k over the block scores (k = topk_blocks; -inf blocks drop out like
// -inf scores), then the mask from the sorted block ids (a binary search per position).

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "common/check.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/indexer/indexer.cuh"
#include "kernels/cuda/pdl.cuh"

namespace di {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins1 = 4096;  // top 12 key bits
constexpr int kBins2 = 1024;  // bits 10..19, then bits 0..9
constexpr int kListCap = 3840;
constexpr int kListPer = 8;  // list entries per thread: kThreads * kListPer >= kListCap
constexpr int kRowPer = 16;  // contiguous row elements per thread per chunk
constexpr uint32_t kNegInfKey = 0x007FFFFFu;    // order_key(-inf)
constexpr int kMaxCtasPerRow = 8;               // a portable cluster
constexpr int32_t kSliceTarget = 16384;         // positions per CTA the plan aims at
constexpr int32_t kSliceMax = 36864;            // positions per CTA at most (144 KiB of scores)
constexpr int32_t kMinSlice = 2048;             // a row is cut only into slices at least this long
constexpr int64_t kSlicedMinRatio = 16;         // the sliced kernel only for rows >= 16 k long
constexpr int32_t kCachedMax = 73728;           // positions the cached kernel holds (2 B each)
constexpr int64_t kCachedPrefetchWins = 57344;  // its prefetching variant wins at any row count
constexpr uint32_t kNegInfKey16 = kNegInfKey >> 16;  // no finite value shares it (rows hold no NaN)
static_assert(kThreads * kListPer >= kListCap);
static_assert(kCachedMax % 32 == 0 && kRowPer == 16, "the cached kernel stores 16 keys a thread");
static_assert(kBins1 % kThreads == 0 && kBins2 % kThreads == 0);

// Monotone map of fp32 bits to uint32 (a < b as floats <=> key(a) < key(b)), -0 -> key(+0).
__device__ __forceinline__ uint32_t order_key(float x) {
  uint32_t b = __float_as_uint(x);
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct TopkShared {
  uint32_t hist[kBins1];
  uint32_t list_key[kListCap];
  int32_t list_idx[kListCap];
  uint32_t scan[kWarps + 1];
  uint32_t found[3];  // bin, count above the bin, total count
};

// Exclusive prefix sum of v in thread order; *total gets the CTA sum. Three barriers, so
// consecutive calls may reuse `scan`.
__device__ uint32_t cta_exclusive_scan(uint32_t v, uint32_t* scan, uint32_t* total) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  uint32_t incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t x = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl += x;
  }
  if (lane == 31) scan[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const uint32_t wv = lane < kWarps ? scan[lane] : 0u;
    uint32_t wi = wv;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t x = __shfl_up_sync(0xFFFFFFFFu, wi, o);
      if (lane >= o) wi += x;
    }
    __syncwarp();
    if (lane < kWarps) scan[lane] = wi - wv;
    if (lane == 31) scan[kWarps] = wi;
  }
  __syncthreads();
  const uint32_t result = scan[warp] + incl - v;
  *total = scan[kWarps];
  __syncthreads();
  return result;
}

// kRowPer contiguous fp32 scores per thread per chunk (16-byte loads where whole): data[i] is
// position first + i, i < len; from the global row (read-only path) or from a CTA's slice of it
// in shared memory (the fp32 bits as copied).
template <bool kGlobal>
struct ScoreSource {
  static constexpr int kPer = kRowPer;
  const float* data;
  int32_t len;
  int32_t first = 0;
  __device__ static float4 load4(const float* p) {
    if constexpr (kGlobal) return __ldg(reinterpret_cast<const float4*>(p));
    return *reinterpret_cast<const float4*>(p);
  }
  __device__ static float load1(const float* p) {
    if constexpr (kGlobal) return __ldg(p);
    return *p;
  }
  __device__ int32_t size() const { return len; }
  __device__ void load(int32_t base, uint32_t (&key)[kPer], int32_t (&idx)[kPer]) const {
    const int32_t at = base + static_cast<int32_t>(threadIdx.x) * kPer;
    if (at + kPer <= len) {
#pragma unroll
      for (int v = 0; v < kPer / 4; ++v) {
        const float4 x = load4(data + at + 4 * v);
        key[4 * v] = order_key(x.x);
        key[4 * v + 1] = order_key(x.y);
        key[4 * v + 2] = order_key(x.z);
        key[4 * v + 3] = order_key(x.w);
      }
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e)
        key[e] = at + e < len ? order_key(load1(data + at + e)) : kNegInfKey;
    }
#pragma unroll
    for (int e = 0; e < kPer; ++e)
      idx[e] = first + at + e;
  }
};
using RowSource = ScoreSource<true>;     // the whole row: {row, n}
using SliceSource = ScoreSource<false>;  // a slice: {data, len, first position}

// The shared list (position order), kListPer contiguous entries per thread.
struct ListSource {
  static constexpr int kPer = kListPer;
  const uint32_t* keys;
  const int32_t* idx;
  int32_t m;
  __device__ int32_t size() const { return m; }
  __device__ void load(int32_t base, uint32_t (&key)[kPer], int32_t (&id)[kPer]) const {
    const int32_t first = base + static_cast<int32_t>(threadIdx.x) * kPer;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      key[e] = first + e < m ? keys[first + e] : kNegInfKey;
      id[e] = first + e < m ? idx[first + e] : -1;
    }
  }
};

// Calls f(key, idx) for each chunk of the source, in position order. (Measured on the H200:
// prefetching the next chunk into a second register buffer was no faster for one row and, with
// twice the registers, slower for many rows; warp-aggregated histogram atomics (match.any) were
// 2.5x slower than plain shared atomics.)
template <class Src, class F>
__device__ __forceinline__ void for_each_chunk(const Src& src, F&& f) {
  for (int32_t base = 0; base < src.size(); base += kThreads * Src::kPer) {
    uint32_t key[Src::kPer];
    int32_t idx[Src::kPer];
    src.load(base, key, idx);
    f(key, idx);
  }
}

// Histogram of (key >> shift) & (bins - 1) over the finite elements with (key & match_mask) ==
// match_value.
template <class Src>
__device__ void histogram(const Src& src, uint32_t* hist, int bins, uint32_t match_mask,
                          uint32_t match_value, int shift) {
  for (int i = static_cast<int>(threadIdx.x); i < bins; i += kThreads)
    hist[i] = 0u;
  __syncthreads();
  for_each_chunk(src, [&](const uint32_t(&key)[Src::kPer], const int32_t(&)[Src::kPer]) {
#pragma unroll
    for (int e = 0; e < Src::kPer; ++e) {
      if (key[e] != kNegInfKey && (key[e] & match_mask) == match_value)
        atomicAdd(&hist[(key[e] >> shift) & static_cast<uint32_t>(bins - 1)], 1u);
    }
  });
  __syncthreads();
}

// The bin holding the need-th largest counted element (need >= 1): found = {bin, count in
// higher bins, total}. found[0..1] are left alone when the total is below need.
__device__ void find_bin(TopkShared& sh, int bins, uint32_t need) {
  const int per = bins / kThreads;
  const int top = bins - static_cast<int>(threadIdx.x) * per;  // this thread: [top - per, top)
  uint32_t sum = 0;
  for (int b = top - per; b < top; ++b)
    sum += sh.hist[b];
  uint32_t total = 0;
  uint32_t above = cta_exclusive_scan(sum, sh.scan, &total);
  for (int b = top - 1; b >= top - per; --b) {
    const uint32_t h = sh.hist[b];
    if (above < need && above + h >= need) {
      sh.found[0] = static_cast<uint32_t>(b);
      sh.found[1] = above;
    }
    above += h;
  }
  if (threadIdx.x == 0) sh.found[2] = total;
  __syncthreads();
}

// The first pass's result over the 12-bit histogram in sh.hist: the bin B1 of the k_eff-th
// largest element, the count above it, its own count and the total (shared memory free again).
struct FirstBin {
  uint32_t b1, above1, hist_b1, total;
};
__device__ FirstBin first_bin(TopkShared& sh, int32_t k_eff) {
  find_bin(sh, kBins1, static_cast<uint32_t>(k_eff));
  FirstBin f;
  f.total = sh.found[2];
  f.b1 = sh.found[0];
  f.above1 = sh.found[1];
  f.hist_b1 = sh.hist[f.b1 & (kBins1 - 1)];
  __syncthreads();
  return f;
}

// Threshold key T and the number of elements equal to T to take, from the elements of bin B1,
// of which need1 >= 1 are to be taken (need1 = k_eff - the count above B1).
template <class Src>
__device__ void refine(const Src& src, TopkShared& sh, uint32_t b1, uint32_t need1,
                       uint32_t* threshold, uint32_t* need_eq) {
  histogram(src, sh.hist, kBins2, 0xFFF00000u, b1 << 20, 10);
  find_bin(sh, kBins2, need1);
  const uint32_t b2 = sh.found[0], above2 = sh.found[1];
  __syncthreads();
  const uint32_t prefix = (b1 << 20) | (b2 << 10);
  histogram(src, sh.hist, kBins2, 0xFFFFFC00u, prefix, 0);
  find_bin(sh, kBins2, need1 - above2);
  const uint32_t b3 = sh.found[0], above3 = sh.found[1];
  __syncthreads();
  *threshold = prefix | b3;
  *need_eq = need1 - above2 - above3;
}

// Writes the selected positions < visible in position order to out, then -1 up to k_eff.
template <class Src>
__device__ void emit(const Src& src, TopkShared& sh, bool take_all, uint32_t threshold,
                     uint32_t need_eq, int32_t visible, int32_t k_eff, int32_t* out) {
  uint32_t eq_base = 0, out_base = 0;
  for_each_chunk(src, [&](const uint32_t(&key)[Src::kPer], const int32_t(&idx)[Src::kPer]) {
    uint32_t n_eq = 0;
#pragma unroll
    for (int e = 0; e < Src::kPer; ++e)
      n_eq += (!take_all && key[e] == threshold) ? 1u : 0u;
    uint32_t eq_total = 0;
    uint32_t eq_rank = eq_base + cta_exclusive_scan(n_eq, sh.scan, &eq_total);
    uint32_t sel_mask = 0;  // bit e: element e is written
#pragma unroll
    for (int e = 0; e < Src::kPer; ++e) {
      bool sel;
      if (take_all) {
        sel = key[e] != kNegInfKey;
      } else if (key[e] == threshold) {
        sel = eq_rank < need_eq;
        ++eq_rank;
      } else {
        sel = key[e] != kNegInfKey && key[e] > threshold;
      }
      if (sel && idx[e] < visible) sel_mask |= 1u << e;
    }
    uint32_t out_total = 0;
    uint32_t pos = out_base + cta_exclusive_scan(__popc(sel_mask), sh.scan, &out_total);
#pragma unroll
    for (int e = 0; e < Src::kPer; ++e) {
      if (sel_mask & (1u << e)) out[pos++] = idx[e];
    }
    eq_base += eq_total;
    out_base += out_total;
  });
  for (int32_t i = static_cast<int32_t>(out_base) + static_cast<int32_t>(threadIdx.x); i < k_eff;
       i += kThreads)
    out[i] = -1;
}

// The exact threshold from src's elements in bin B1 (need1 of them to take), then the emission.
template <class Src>
__device__ void refine_emit(const Src& src, TopkShared& sh, uint32_t b1, uint32_t need1,
                            int32_t visible, int32_t k_eff, int32_t* out) {
  uint32_t threshold = 0, need_eq = 0;
  refine(src, sh, b1, need1, &threshold, &need_eq);
  emit(src, sh, false, threshold, need_eq, visible, k_eff, out);
}

// Appends the finite elements of src with key >= lo to (list_key, list_idx) in position order;
// returns how many (the same value in every thread).
template <class Src>
__device__ uint32_t compact(const Src& src, TopkShared& sh, uint32_t lo, uint32_t* list_key,
                            int32_t* list_idx) {
  uint32_t count = 0;
  for_each_chunk(src, [&](const uint32_t(&key)[Src::kPer], const int32_t(&idx)[Src::kPer]) {
    uint32_t mine = 0;
#pragma unroll
    for (int e = 0; e < Src::kPer; ++e)
      mine |= (key[e] != kNegInfKey && key[e] >= lo) ? (1u << e) : 0u;
    uint32_t added = 0;
    uint32_t pos = count + cta_exclusive_scan(__popc(mine), sh.scan, &added);
#pragma unroll
    for (int e = 0; e < Src::kPer; ++e) {
      if (mine & (1u << e)) {
        list_key[pos] = key[e];
        list_idx[pos] = idx[e];
        ++pos;
      }
    }
    count += added;
  });
  return count;
}

// One row: scores [n], out [k_eff]. Every thread of the CTA calls it (uniform control flow).
__device__ void topk_row(TopkShared& sh, const float* row, int32_t n, int32_t visible, int32_t k,
                         int32_t* out) {
  const int32_t k_eff = min(k, n);
  if (k_eff <= 0) return;
  const RowSource rsrc{row, n};
  histogram(rsrc, sh.hist, kBins1, 0u, 0u, 20);
  const auto [b1, above1, hist_b1, total] = first_bin(sh, k_eff);
  if (total <= static_cast<uint32_t>(k_eff)) {  // every finite value is selected
    emit(rsrc, sh, true, 0u, 0u, visible, k_eff, out);
    return;
  }
  const uint32_t need1 = static_cast<uint32_t>(k_eff) - above1;
  if (above1 + hist_b1 <= static_cast<uint32_t>(kListCap)) {
    // Compact the finite elements with key >= B1 << 20 into the list, in position order.
    const uint32_t count = compact(rsrc, sh, b1 << 20, sh.list_key, sh.list_idx);
    __syncthreads();
    const ListSource lsrc{sh.list_key, sh.list_idx, static_cast<int32_t>(count)};
    refine_emit(lsrc, sh, b1, need1, visible, k_eff, out);
  } else {
    refine_emit(rsrc, sh, b1, need1, visible, k_eff, out);
  }
}

// grid = rows (one CTA per row).
__global__ void __launch_bounds__(kThreads) topk_kernel(IndexerTopkParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ TopkShared sh;
  const int64_t r = blockIdx.x;
  const int32_t n = static_cast<int32_t>(p.n);
  const int32_t visible = p.row_visible != nullptr ? __ldg(p.row_visible + r) : n;
  topk_row(sh, p.scores + r * p.score_stride, n, visible, p.k, p.out + r * p.out_stride);
}

// Shared memory of the sliced kernel: TopkShared, the summed histogram bins this CTA owns
// (kBins1 / C), its list length, then its slice of the row (16-byte aligned).
__host__ __device__ constexpr size_t sliced_merged_offset() {
  return (sizeof(TopkShared) + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t sliced_data_offset(int ctas) {
  return sliced_merged_offset() + (static_cast<size_t>(ctas > 1 ? kBins1 / ctas : 0) + 4) * 4;
}

// grid = rows * C, clusters of C CTAs (one row each); `slice` positions per CTA, a multiple of 4.
__global__ void __launch_bounds__(kThreads, 2)
    topk_sliced_kernel(IndexerTopkParams p, int32_t slice) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  extern __shared__ __align__(16) uint8_t smem[];
  TopkShared& sh = *reinterpret_cast<TopkShared*>(smem);
  uint32_t* merged = reinterpret_cast<uint32_t*>(smem + sliced_merged_offset());
  uint32_t* list_len = merged + (ctas > 1 ? kBins1 / ctas : 0);
  float* data = reinterpret_cast<float*>(smem + sliced_data_offset(ctas));
  const int tid = static_cast<int>(threadIdx.x);

  const int64_t r = blockIdx.x / ctas;
  const int32_t n = static_cast<int32_t>(p.n);
  const int32_t visible = p.row_visible != nullptr ? __ldg(p.row_visible + r) : n;
  const int32_t k_eff = min(p.k, n);
  const float* row = p.scores + r * p.score_stride;
  const int32_t first = rank * slice;
  const int32_t len = max(0, min(slice, n - first));

  // The slice into shared memory: the row's one global read.
  const int32_t vec = len / 4;
  for (int32_t i = tid; i < vec; i += kThreads)
    cuda_detail::cp_async16(data + 4 * i, row + first + 4 * i, true);
  for (int32_t i = 4 * vec + tid; i < len; i += kThreads)
    cuda_detail::cp_async4(data + i, row + first + i, true);
  cuda_detail::cp_async_commit();
  for (int i = tid; i < kBins1; i += kThreads)
    sh.hist[i] = 0u;
  cuda_detail::cp_async_wait<0>();
  __syncthreads();

  // Histogram of the top 12 key bits of the slice, then summed over the cluster.
  auto count = [&](float x) {
    const uint32_t key = order_key(x);
    if (key != kNegInfKey) atomicAdd(&sh.hist[key >> 20], 1u);
  };
  for (int32_t i = tid; i < vec; i += kThreads) {
    const float4 x = reinterpret_cast<const float4*>(data)[i];
    count(x.x);
    count(x.y);
    count(x.z);
    count(x.w);
  }
  for (int32_t i = 4 * vec + tid; i < len; i += kThreads)
    count(data[i]);
  __syncthreads();
  if (ctas > 1) {
    const int range = kBins1 / ctas;
    cluster.sync();
    for (int b = tid; b < range; b += kThreads) {
      uint32_t sum = 0;
#pragma unroll
      for (int j = 0; j < kMaxCtasPerRow; ++j)
        sum += j < ctas ? cluster.map_shared_rank(sh.hist, j)[rank * range + b] : 0u;
      merged[b] = sum;
    }
    cluster.sync();  // every CTA's own bins are summed: the local histograms are free
    constexpr int kPer = kBins1 / kThreads;
    uint32_t bins[kPer];  // every remote load in flight before the first store
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int b = tid + kThreads * e;
      bins[e] = cluster.map_shared_rank(merged, b / range)[b % range];
    }
#pragma unroll
    for (int e = 0; e < kPer; ++e)
      sh.hist[tid + kThreads * e] = bins[e];
    __syncthreads();
  }
  const auto [b1, above1, hist_b1, total] = first_bin(sh, k_eff);
  // Every finite value is selected (at most k_eff <= kListCap of them), or the candidates at or
  // above B1 fit the list: each CTA compacts its own, CTA 0 appends the others' in rank order.
  const bool take_all = total <= static_cast<uint32_t>(k_eff);
  const bool list_ok = take_all || above1 + hist_b1 <= static_cast<uint32_t>(kListCap);
  uint32_t listed = 0;
  if (list_ok) {
    listed = compact(SliceSource{data, len, first}, sh, take_all ? 0u : b1 << 20, sh.list_key,
                     sh.list_idx);
  }
  if (ctas > 1) {
    if (tid == 0) *list_len = listed;
    cluster.sync();
    if (rank == 0 && list_ok) {
      // The other lists appended in rank order; each step's remote loads of all ranks are
      // issued before its stores.
      uint32_t at[kMaxCtasPerRow], len[kMaxCtasPerRow];
      uint32_t longest = 0;
#pragma unroll
      for (int j = 1; j < kMaxCtasPerRow; ++j)
        len[j] = j < ctas ? *cluster.map_shared_rank(list_len, j) : 0u;
#pragma unroll
      for (int j = 1; j < kMaxCtasPerRow; ++j) {
        at[j] = listed;
        listed += len[j];
        longest = max(longest, len[j]);
      }
      for (uint32_t i = static_cast<uint32_t>(tid); i < longest; i += kThreads) {
        uint32_t key[kMaxCtasPerRow];
        int32_t idx[kMaxCtasPerRow];
#pragma unroll
        for (int j = 1; j < kMaxCtasPerRow; ++j) {
          if (i < len[j]) {
            key[j] = cluster.map_shared_rank(sh.list_key, j)[i];
            idx[j] = cluster.map_shared_rank(sh.list_idx, j)[i];
          }
        }
#pragma unroll
        for (int j = 1; j < kMaxCtasPerRow; ++j) {
          if (i < len[j]) {
            sh.list_key[at[j] + i] = key[j];
            sh.list_idx[at[j] + i] = idx[j];
          }
        }
      }
    }
    cluster.sync();  // nothing reads another CTA's shared memory past this point
    if (rank != 0) return;
  }
  __syncthreads();
  int32_t* out = p.out + r * p.out_stride;
  const ListSource lsrc{sh.list_key, sh.list_idx, static_cast<int32_t>(listed)};
  if (take_all) {
    emit(lsrc, sh, true, 0u, 0u, visible, k_eff, out);
    return;
  }
  const uint32_t need1 = static_cast<uint32_t>(k_eff) - above1;
  if (list_ok) {
    refine_emit(lsrc, sh, b1, need1, visible, k_eff, out);
  } else {  // many equal values: the whole-row passes over the global row
    refine_emit(RowSource{row, n}, sh, b1, need1, visible, k_eff, out);
  }
}

// Cached kernel (many rows): one CTA per row reads the row from global memory once, building the
// 12-bit histogram and keeping the top 16 bits of every key in shared memory (key16; 2 bytes a
// position, positions past n -inf). From the threshold bin B1: every key16 whose top 12 bits
// are above B1 is selected outright, into a bitmap of the row (bit b of word w = position
// 32 w + b; a thread owns a contiguous run of words). The bin's positions (the bin's count:
// tens to a few hundred) are listed in position order from per-word bin bits and one CTA scan,
// their full keys read again from global memory (the row was just read: L2), refined as in the
// other kernels, and the selected ones OR-ed into the bitmap. Emission: each thread's popcounts
// below `visible`, one CTA scan, the set bits in order; -1 after. Many ties (the bin's
// candidates overflow the list) fall back to the whole-row passes over the global row.
// Thread t owns words [t per, t per + per) (a run of 32 per positions); its run's keys start at
// byte t (64 per + 16): the 16-byte pad puts the 16-byte loads of neighbouring threads in
// different bank groups (an odd number of 16-byte units apart).
__host__ __device__ constexpr size_t cached_keys_offset() {
  return (sizeof(TopkShared) + 15) / 16 * 16;
}
__host__ __device__ constexpr int64_t cached_words(int64_t n) {
  return (n + 31) / 32;
}
__host__ __device__ constexpr int32_t cached_per(int64_t n) {
  return static_cast<int32_t>((cached_words(n) + kThreads - 1) / kThreads);
}
__host__ __device__ constexpr int32_t cached_run_bytes(int64_t n) {
  return 64 * cached_per(n) + 16;
}
__host__ __device__ constexpr size_t cached_bits_offset(int64_t n) {
  const int64_t runs = (cached_words(n) + cached_per(n) - 1) / cached_per(n);
  return cached_keys_offset() + static_cast<size_t>(runs * cached_run_bytes(n));
}
__host__ __device__ constexpr size_t cached_smem_bytes(int64_t n) {
  return cached_bits_offset(n) + static_cast<size_t>(cached_words(n)) * 4;
}
static_assert(cached_smem_bytes(kCachedMax) <= 227 * 1024, "the cached kernel's shared memory");

// Bits of the positions below `lim` in word w.
__device__ __forceinline__ uint32_t below_mask(int32_t w, int32_t lim) {
  const int32_t left = lim - 32 * w;
  return left >= 32 ? 0xFFFFFFFFu : (left <= 0 ? 0u : (1u << left) - 1u);
}

// grid = rows (one CTA per row); dynamic shared memory cached_smem_bytes(n).
// kPrefetch: the row's chunks are read one ahead (64 registers instead of 40: the variant for
// rows whose shared memory leaves no more CTAs a SM than those registers do; plan_topk).
template <bool kPrefetch>
__global__ void __launch_bounds__(kThreads) topk_cached_kernel(IndexerTopkParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ __align__(16) uint8_t smem[];
  TopkShared& sh = *reinterpret_cast<TopkShared*>(smem);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t r = blockIdx.x;
  const int32_t n = static_cast<int32_t>(p.n);
  const int32_t words = static_cast<int32_t>(cached_words(n));
  const int32_t per = cached_per(n), run_bytes = cached_run_bytes(n);
  uint8_t* key16 = smem + cached_keys_offset();  // runs of 32 per 16-bit keys, padded
  uint32_t* bits = reinterpret_cast<uint32_t*>(smem + cached_bits_offset(n));  // [words]
  const int32_t visible = p.row_visible != nullptr ? __ldg(p.row_visible + r) : n;
  const int32_t k_eff = min(p.k, n);
  const float* row = p.scores + r * p.score_stride;
  int32_t* out = p.out + r * p.out_stride;

  for (int i = tid; i < kBins1; i += kThreads)
    sh.hist[i] = 0u;
  __syncthreads();
  // The row's one read: the histogram and the 16-bit keys (16 positions a thread: 32 bytes).
  const RowSource rsrc{row, n};
  auto take = [&](const uint32_t(&key)[kRowPer], const int32_t(&idx)[kRowPer]) {
#pragma unroll
    for (int e = 0; e < kRowPer; ++e)
      if (key[e] != kNegInfKey) atomicAdd(&sh.hist[key[e] >> 20], 1u);
    if (idx[0] < 32 * words) {  // 16 positions never straddle a run (32 per of them)
      uint32_t w[kRowPer / 2];
#pragma unroll
      for (int i = 0; i < kRowPer / 2; ++i)
        w[i] = (key[2 * i] >> 16) | (key[2 * i + 1] & 0xFFFF0000u);
      const int32_t run = idx[0] / (32 * per), in_run = idx[0] - run * 32 * per;
      uint4* dst = reinterpret_cast<uint4*>(key16 + run * run_bytes + 2 * in_run);
      dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
      dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
  };
  // kPrefetch: whole chunks with the next one's loads in flight (one CTA a SM, whose 16 warps
  // alone must keep the row streaming: 132 x 64K 26.1 -> 22.4 us); then the tail (else every
  // chunk) through the source's bounds-checked load.
  constexpr int32_t kStep = kThreads * kRowPer;
  const int32_t full = kPrefetch ? n / kStep * kStep : 0;
  int32_t base = 0;
  if (kPrefetch && full > 0) {
    float4 raw[2][kRowPer / 4];
    auto fetch = [&](int32_t at, float4(&dst)[kRowPer / 4]) {
      const float4* src = reinterpret_cast<const float4*>(row + at + tid * kRowPer);
#pragma unroll
      for (int v = 0; v < kRowPer / 4; ++v)
        dst[v] = __ldg(src + v);
    };
    auto consume = [&](int32_t at, const float4(&src)[kRowPer / 4]) {
      uint32_t key[kRowPer];
      int32_t idx[kRowPer];
#pragma unroll
      for (int v = 0; v < kRowPer / 4; ++v) {
        key[4 * v] = order_key(src[v].x);
        key[4 * v + 1] = order_key(src[v].y);
        key[4 * v + 2] = order_key(src[v].z);
        key[4 * v + 3] = order_key(src[v].w);
      }
#pragma unroll
      for (int e = 0; e < kRowPer; ++e)
        idx[e] = at + tid * kRowPer + e;
      take(key, idx);
    };
    fetch(0, raw[0]);
    for (; base < full; base += 2 * kStep) {
      if (base + kStep < full) fetch(base + kStep, raw[1]);
      consume(base, raw[0]);
      if (base + kStep >= full) {
        base += kStep;
        break;
      }
      if (base + 2 * kStep < full) fetch(base + 2 * kStep, raw[0]);
      consume(base + kStep, raw[1]);
    }
  }
  for (; base < n; base += kStep) {
    uint32_t key[kRowPer];
    int32_t idx[kRowPer];
    rsrc.load(base, key, idx);
    take(key, idx);
  }
  __syncthreads();
  const auto [b1, above1, hist_b1, total] = first_bin(sh, k_eff);
  const bool take_all = total <= static_cast<uint32_t>(k_eff);  // every finite value
  const uint32_t need1 = static_cast<uint32_t>(k_eff) - above1;
  if (!take_all && above1 + hist_b1 > static_cast<uint32_t>(kListCap)) {
    refine_emit(rsrc, sh, b1, need1, visible, k_eff, out);  // many equal values: global passes
    return;
  }

  // Above-bin bits into the bitmap; the bin's bits kept per word. B1 >= 8 (the bin of a finite
  // value), so -inf (top 12 bits 7) is never above nor in it; take_all selects every finite key.
  constexpr int kMaxPer = (kCachedMax / 32 + kThreads - 1) / kThreads;
  const int w0 = tid * per;
  uint32_t in_bin[kMaxPer];
  uint32_t n_in = 0;
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    in_bin[i] = 0u;
    const int w = w0 + i;
    if (i < per && w < words) {
      uint32_t above = 0, in = 0;
      const uint4* src = reinterpret_cast<const uint4*>(key16 + tid * run_bytes + 64 * i);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 v = src[q];
        const uint32_t pair[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t k16 = (pair[j / 2] >> (16 * (j % 2))) & 0xFFFFu;
          const int b = 8 * q + j;
          const bool up = take_all ? k16 > kNegInfKey16 : (k16 >> 4) > b1;
          above |= up ? (1u << b) : 0u;
          in |= (!take_all && (k16 >> 4) == b1) ? (1u << b) : 0u;
        }
      }
      bits[w] = above;
      in_bin[i] = in;
      n_in += __popc(in);
    }
  }
  // The bin's positions in position order, then their full keys from the global row.
  uint32_t listed = 0;
  uint32_t at = cta_exclusive_scan(n_in, sh.scan, &listed);
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    uint32_t x = in_bin[i];
    while (x != 0u) {
      const int b = __ffs(x) - 1;
      x &= x - 1u;
      sh.list_idx[at++] = 32 * (w0 + i) + b;
    }
  }
  __syncthreads();
  for (uint32_t j = static_cast<uint32_t>(tid); j < listed; j += kThreads)
    sh.list_key[j] = order_key(__ldg(row + sh.list_idx[j]));
  __syncthreads();
  if (!take_all) {
    const ListSource lsrc{sh.list_key, sh.list_idx, static_cast<int32_t>(listed)};
    uint32_t threshold = 0, need_eq = 0;
    refine(lsrc, sh, b1, need1, &threshold, &need_eq);
    // The bin's selected elements: key > T, or key == T among the first need_eq of those in
    // position order (the list's order).
    uint32_t eq_base = 0;
    for_each_chunk(lsrc, [&](const uint32_t(&key)[kListPer], const int32_t(&idx)[kListPer]) {
      uint32_t n_eq = 0;
#pragma unroll
      for (int e = 0; e < kListPer; ++e)
        n_eq += key[e] == threshold ? 1u : 0u;
      uint32_t eq_total = 0;
      uint32_t eq_rank = eq_base + cta_exclusive_scan(n_eq, sh.scan, &eq_total);
#pragma unroll
      for (int e = 0; e < kListPer; ++e) {
        bool sel = key[e] > threshold && key[e] != kNegInfKey;
        if (key[e] == threshold) sel = eq_rank++ < need_eq;
        if (sel) atomicOr(&bits[idx[e] >> 5], 1u << (idx[e] & 31));
      }
      eq_base += eq_total;
    });
    __syncthreads();
  }
  // Emission: the selected positions below `visible` in order, then -1 up to k_eff.
  const int32_t lim = min(visible, n);
  uint32_t count = 0;
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    const int w = w0 + i;
    if (i < per && w < words) count += __popc(bits[w] & below_mask(w, lim));
  }
  uint32_t written = 0;
  uint32_t slot = cta_exclusive_scan(count, sh.scan, &written);
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    const int w = w0 + i;
    if (i < per && w < words) {
      uint32_t x = bits[w] & below_mask(w, lim);
      while (x != 0u) {
        const int b = __ffs(x) - 1;
        x &= x - 1u;
        out[slot++] = 32 * w + b;
      }
    }
  }
  for (int32_t i = static_cast<int32_t>(written) + tid; i < k_eff; i += kThreads)
    out[i] = -1;
}

// Block scores: bs[r, b] = max of the row's scores in block b (reference std::max order: a NaN
// never enters), the block holding position visible - 1 pinned to +inf. grid = (ceil(nb / 256),
// rows).
__global__ void block_max_kernel(IndexerCandidateParams p, float* bscore, int64_t bstride) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t r = blockIdx.y;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nb = (p.n + p.block_size - 1) / p.block_size;
  if (b >= nb) return;
  const float* row = p.scores + r * p.score_stride;
  float m = -__int_as_float(0x7F800000);
  const int64_t end = min(p.n, (b + 1) * p.block_size);
  for (int64_t t = b * p.block_size; t < end; ++t) {
    const float x = __ldg(row + t);
    m = m < x ? x : m;
  }
  const int32_t visible = __ldg(p.row_visible + r);
  if (visible >= 1 && (visible - 1) / p.block_size == b) m = __int_as_float(0x7F800000);
  bscore[r * bstride + b] = m;
}

// mask[r, t] = block t / block_size is among the row's selected blocks (sorted ascending, -1
// padded). grid = (ceil(n_blocks / kThreads), rows): a thread finds its block in the list staged
// in shared memory (binary search) and writes the block's block_size mask bytes.
__global__ void __launch_bounds__(kThreads)
    pool_mask_kernel(IndexerCandidateParams p, const int32_t* ids, int64_t ids_stride,
                     int32_t n_ids) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ int32_t sel[kIndexTopkMax];
  const int64_t r = blockIdx.y;
  for (int i = static_cast<int>(threadIdx.x); i < n_ids; i += kThreads)
    sel[i] = __ldg(ids + r * ids_stride + i);
  __syncthreads();
  const int64_t nb = (p.n + p.block_size - 1) / p.block_size;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= nb) return;
  // First entry >= b; the -1 padding sorts last by treating it as +infinity.
  int32_t lo = 0, hi = n_ids;
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    const int32_t v = sel[mid];
    if (v >= 0 && v < b) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const uint8_t keep = (lo < n_ids && sel[lo] == b) ? 1 : 0;
  uint8_t* mask = p.mask + r * p.mask_stride;
  const int64_t end = min(p.n, (b + 1) * p.block_size);
  for (int64_t t = b * p.block_size; t < end; ++t)
    mask[t] = keep;
}

// grid = (ceil(n / 256), rows).
__global__ void apply_mask_kernel(IndexerMaskParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  const int64_t r = blockIdx.y;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.n) return;
  if (t >= p.mask_len || p.mask[r * p.mask_stride + t] == 0)
    p.scores[r * p.score_stride + t] = -__int_as_float(0x7F800000);
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

void check_topk(const IndexerTopkParams& p, const char* op) {
  DI_CHECK(p.rows >= 0 && p.n >= 0 && p.n < (int64_t{1} << 31) - kThreads * kRowPer,
           "{}: bad sizes (rows={}, n={})", op, p.rows, p.n);
  DI_CHECK(p.k >= 1 && p.k <= kIndexTopkMax, "{}: k {} outside [1, {}]", op, p.k, kIndexTopkMax);
  DI_CHECK(p.ctas_per_row == -2 || p.ctas_per_row == -1 || p.ctas_per_row == 0 ||
               p.ctas_per_row == 1 || p.ctas_per_row == 2 || p.ctas_per_row == 4 ||
               p.ctas_per_row == kMaxCtasPerRow,
           "{}: ctas_per_row {} must be -2 (cached), -1 (whole row), 0 (chosen), 1, 2, 4 or {}", op,
           p.ctas_per_row, kMaxCtasPerRow);
  DI_CHECK(p.rows <= 0x7FFFFFFF / kMaxCtasPerRow, "{}: {} rows is too many", op, p.rows);
  const int64_t k_eff = p.k < p.n ? p.k : p.n;
  DI_CHECK(p.out_stride >= k_eff && p.score_stride >= p.n && p.score_stride % 4 == 0,
           "{}: strides (score_stride={}, out_stride={}) for n={}, k={}", op, p.score_stride,
           p.out_stride, p.n, p.k);
  if (p.rows == 0 || p.n == 0) return;
  DI_CHECK(p.scores != nullptr && p.out != nullptr, "{}: null pointer (rows={}, n={})", op, p.rows,
           p.n);
  DI_CHECK(aligned(p.scores, 16), "{}: scores must be 16-byte aligned", op);
}

// CTAs per row of the sliced kernel (0: the whole-row kernel, -2: the cached kernel) and the
// slice length.
struct TopkPlan {
  int ctas = 0;
  int32_t slice = 0;
  bool prefetch = false;  // ctas == -2: the cached kernel's prefetching variant
};

// The cached kernel may take the shared memory of its longest row (the occupancy query counts
// a launch above the function's allowance as not resident).
void allow_cached_smem() {
  for (const auto kernel : {topk_cached_kernel<false>, topk_cached_kernel<true>}) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(cached_smem_bytes(kCachedMax))));
  }
}

// CTAs a SM of the cached kernel for rows of n positions, and whether that is its prefetching
// variant (chosen when its registers cost no residency).
struct CachedFit {
  int per_sm = 0;
  bool prefetch = false;
};
CachedFit cached_fit(int64_t n) {
  allow_cached_smem();
  int plain = 0, prefetch = 0;
  const size_t smem = cached_smem_bytes(n);
  DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&plain, topk_cached_kernel<false>,
                                                              kThreads, smem));
  DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&prefetch, topk_cached_kernel<true>,
                                                              kThreads, smem));
  return prefetch >= plain ? CachedFit{prefetch, true} : CachedFit{plain, false};
}

TopkPlan plan_topk(const IndexerTopkParams& p, const char* op) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  if (p.ctas_per_row == -1) return TopkPlan{};  // the whole-row kernel
  if (p.ctas_per_row == -2) {
    DI_CHECK(p.n <= kCachedMax, "{}: ctas_per_row -2 holds at most {} positions, n = {}", op,
             kCachedMax, p.n);
    return TopkPlan{-2, 0, cached_fit(p.n).prefetch};
  }
  int64_t want = p.ctas_per_row;
  if (want == 0) {
    const int sms = current_sm_count();
    // Enough slices to keep them near kSliceTarget; with fewer rows than SMs, more (not shorter
    // than kMinSlice) so that the rows spread over the GPU.
    want = ceil_div(p.n, kSliceTarget);
    if (p.rows < sms) want = std::max(want, std::min<int64_t>(sms / p.rows, p.n / kMinSlice));
    want = std::clamp<int64_t>(want, 1, kMaxCtasPerRow);
    int64_t pow2 = 1;
    while (pow2 < want)
      pow2 *= 2;
    want = pow2;
    // The sliced kernel wins on latency (one read, spread over 2 to 8 SMs a row) while the
    // rows' CTAs fit one wave; past that the whole-row kernel, whose CTAs overlap their two
    // global reads across rows, is faster (H200, 64K positions: 132 rows 31.8 us whole-row vs
    // 44 us with 2 CTAs a row), and one CTA on a short row gains little (1,024 positions: 7.9
    // vs 8.5 us) for a cluster launch with a shared-memory attribute. With k a large share of
    // the row (the candidate pool's top-2048 of 8,192 blocks) CTA 0's list work dominates and
    // the cluster only adds barriers (docs/PERF.md).
    if (want < 2 || p.rows * want > sms || p.n < kSlicedMinRatio * p.k) {
      // Many rows (or short ones): one read of the row with its 16-bit keys kept, where it fits
      // and does not cost residency. Its shared memory (2 B a position + the 48 KiB of
      // TopkShared) caps it at fewer CTAs a SM than the whole-row kernel's registers allow from
      // ~16K positions up; with more waves than that the whole-row kernel's overlapped reads win
      // on shorter rows (H200, k = 512: 1,024 x 32K 103 vs 117 us), within one wave or at equal
      // residency the single read wins (132 x 64K 22.4 vs 31.9 us, 2,048 x 8K 87 vs 95 us). Rows
      // shorter than 16 k (the candidate pool) stay on the whole-row kernel.
      // The prefetching variant at one CTA a SM beats the whole-row kernel's two from
      // kCachedPrefetchWins positions up whatever the rows (1,024 rows: 64K 169 vs 183 us, 56K
      // 160 vs 162; 48K 143 vs 141, 32K 117 vs 103).
      if (p.n > kCachedMax || p.n < kSlicedMinRatio * p.k) return TopkPlan{};
      const CachedFit fit = cached_fit(p.n);
      int per_sm_whole = 0;
      DI_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_whole, topk_kernel, kThreads, 0));
      const bool one_wave = p.rows <= static_cast<int64_t>(fit.per_sm) * sms;
      const bool long_rows = fit.prefetch && p.n >= kCachedPrefetchWins;
      return fit.per_sm > 0 && (one_wave || long_rows || fit.per_sm >= per_sm_whole)
                 ? TopkPlan{-2, 0, fit.prefetch}
                 : TopkPlan{};
    }
  }
  TopkPlan plan;
  plan.slice = static_cast<int32_t>(ceil_div(ceil_div(p.n, want), 4) * 4);
  if (plan.slice > kSliceMax) {
    DI_CHECK(p.ctas_per_row == 0, "{}: ctas_per_row {} leaves {} positions per CTA (at most {})",
             op, p.ctas_per_row, plan.slice, kSliceMax);
    plan.slice = 0;  // the whole-row kernel
    return plan;
  }
  plan.ctas = static_cast<int>(want);
  return plan;
}

void launch_topk(const IndexerTopkParams& p, cudaStream_t stream, const char* op) {
  const TopkPlan plan = plan_topk(p, op);
  if (plan.ctas == 0) {
    cuda_detail::launch_pdl(topk_kernel, static_cast<unsigned>(p.rows), kThreads, 0, stream, p);
    DI_CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (plan.ctas == -2) {
    const size_t smem = cached_smem_bytes(p.n);
    const auto kernel = plan.prefetch ? topk_cached_kernel<true> : topk_cached_kernel<false>;
    cuda_detail::launch_pdl(kernel, static_cast<unsigned>(p.rows), kThreads, smem, stream, p);
    DI_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const size_t smem = sliced_data_offset(plan.ctas) + static_cast<size_t>(plan.slice) * 4;
  DI_CUDA_CHECK(cudaFuncSetAttribute(
      topk_sliced_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(p.rows * plan.ctas));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2]{};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(plan.ctas);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1] = cuda_detail::pdl_attribute();  // the kernel waits first (kernels/cuda/pdl.cuh)
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, topk_sliced_kernel, p, plan.slice));
}

}  // namespace

void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream) {
  check_topk(p, "indexer_topk");
  if (p.rows == 0 || p.n == 0) return;
  launch_topk(p, stream, "indexer_topk");
}

size_t indexer_candidates_workspace_bytes(int64_t rows, int64_t n, int block_size,
                                          int topk_blocks) {
  DI_CHECK(rows >= 0 && n >= 0 && block_size > 0 && topk_blocks >= 1,
           "indexer_candidates: bad sizes (rows={}, n={}, block_size={}, topk_blocks={})", rows, n,
           block_size, topk_blocks);
  const int64_t nb = (n + block_size - 1) / block_size;
  const int64_t n_ids = topk_blocks < nb ? topk_blocks : nb;
  return static_cast<size_t>(rows * round_up(nb, 4) * 4 + rows * round_up(n_ids, 4) * 4);
}

void indexer_candidates(const IndexerCandidateParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.n >= 0 && p.block_size > 0 && p.topk_blocks >= 1 &&
               p.topk_blocks <= kIndexTopkMax && p.score_stride >= p.n && p.mask_stride >= p.n,
           "indexer_candidates: bad sizes (rows={}, n={}, block_size={}, topk_blocks={}, "
           "score_stride={}, mask_stride={})",
           p.rows, p.n, p.block_size, p.topk_blocks, p.score_stride, p.mask_stride);
  if (p.rows == 0 || p.n == 0) return;
  DI_CHECK(p.scores != nullptr && p.row_visible != nullptr && p.workspace != nullptr &&
               p.mask != nullptr,
           "indexer_candidates: null pointer (rows={}, n={})", p.rows, p.n);
  DI_CHECK(aligned(p.workspace, 16), "indexer_candidates: workspace must be 16-byte aligned");
  DI_CHECK(p.rows <= 65535, "indexer_candidates: {} rows is too many for one launch", p.rows);
  const int64_t nb = (p.n + p.block_size - 1) / p.block_size;
  const int64_t bstride = round_up(nb, 4);
  const int32_t n_ids = static_cast<int32_t>(p.topk_blocks < nb ? p.topk_blocks : nb);
  const int64_t ids_stride = round_up(n_ids, 4);
  float* bscore = static_cast<float*>(p.workspace);
  int32_t* ids = reinterpret_cast<int32_t*>(bscore + p.rows * bstride);

  cuda_detail::launch_pdl(
      block_max_kernel,
      dim3(static_cast<unsigned>((nb + 255) / 256), static_cast<unsigned>(p.rows)), 256, 0, stream,
      p, bscore, bstride);
  DI_CUDA_CHECK(cudaGetLastError());
  IndexerTopkParams tp;
  tp.scores = bscore;
  tp.row_visible = nullptr;  // no block is dropped for visibility
  tp.rows = p.rows;
  tp.n = nb;
  tp.score_stride = bstride;
  tp.k = p.topk_blocks;
  tp.out = ids;
  tp.out_stride = ids_stride;
  check_topk(tp, "indexer_candidates");
  launch_topk(tp, stream, "indexer_candidates");
  cuda_detail::launch_pdl(
      pool_mask_kernel,
      dim3(static_cast<unsigned>((nb + kThreads - 1) / kThreads), static_cast<unsigned>(p.rows)),
      kThreads, 0, stream, p, ids, ids_stride, n_ids);
  DI_CUDA_CHECK(cudaGetLastError());
}

void indexer_apply_mask(const IndexerMaskParams& p, cudaStream_t stream) {
  DI_CHECK(p.rows >= 0 && p.n >= 0 && p.score_stride >= p.n && p.mask_len >= 0 &&
               p.mask_stride >= (p.mask_len < p.n ? p.mask_len : p.n),
           "indexer_apply_mask: bad sizes (rows={}, n={}, score_stride={}, mask_len={}, "
           "mask_stride={})",
           p.rows, p.n, p.score_stride, p.mask_len, p.mask_stride);
  if (p.rows == 0 || p.n == 0) return;
  DI_CHECK(p.scores != nullptr && (p.mask != nullptr || p.mask_len == 0),
           "indexer_apply_mask: null pointer (rows={}, n={})", p.rows, p.n);
  DI_CHECK(p.rows <= 65535, "indexer_apply_mask: {} rows is too many for one launch", p.rows);
  cuda_detail::launch_pdl(
      apply_mask_kernel,
      dim3(static_cast<unsigned>((p.n + 255) / 256), static_cast<unsigned>(p.rows)), 256, 0, stream,
      p);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
