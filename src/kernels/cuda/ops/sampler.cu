// The GPU sampler: sample_row (sampling/sampler.cc) for a batch of rows, one 1,024-thread CTA per
// row, with the same processor order, float32 formulas, tie rules and Philox noise.
//
// Phases per row (each a pass over the vocabulary, separated by CTA barriers):
//   1. copy the raw logits into the row's workspace; -inf on the suppressed ids; penalties on the
//      ids of the prompt/output lists only (per-token flags and counts in the workspace make each
//      distinct token penalised once, as the CPU's bitset and sorted counts do)
//   2. temperature (IEEE fp32 division), max with NaN detection, argmax with the lowest id
//   3. top_k: the k-th largest key among eligible tokens (min_p), key = (order-preserving z bits,
//      ~id): a radix select, 8 bits a level, exact
//   4. top_p: the first key, descending, whose prefix mass exp(z - z_max) reaches top_p * total:
//      the same radix walk with masses summed as 128-bit fixed point (2^-90 units), exact and
//      independent of summation order
//   5. the exponential race argmax exp(d) / -log(u) over the kept tokens, u from Philox
//   6. logprobs of the raw logits: log-sum-exp in double (fixed tree order), top-N by radix select
// Greedy rows without penalty lists, suppression or logprobs (every decode row of greedy
// generation) skip the phases: sampler_greedy_kernel spreads the row's argmax over kGreedySlices
// CTAs reading the raw logits (one CTA per row had to copy 129K logits and pass over them again:
// ~80 us at batch 1), each writing its slice's best as a 64-bit key; the row's sampler_kernel
// CTA then takes the maximum of those keys. The key orders (value, lower id) exactly as the
// sequential argmax does (-0.0 counted as +0.0), with an all-ones key for a slice holding a NaN.
// Shared-memory histograms aggregate the lanes of a warp that hit one bin (__match_any_sync), so
// the skewed first radix levels (most tokens share the top bits of z) do not serialise atomics.
//
// Differences from the CPU come only from rounding: exp/log (CUDA double vs glibc, <= 1 ulp), the
// top_p mass (exact here, a sequential double sum on the CPU). A token can differ only when two
// race scores agree to ~1e-15, or a top_p prefix mass equals the target to ~1e-13 relative.

#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/ops/sampler.cuh"
#include "sampling/philox.h"

namespace di {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kNoBin = kBins;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

using u128 = unsigned __int128;

int64_t padded_vocab(int64_t vocab) {
  return (vocab + 63) / 64 * 64;
}

constexpr int kGreedySlices = 32;
constexpr int kGreedyThreads = 256;
constexpr unsigned long long kGreedyNaN = ~0ull;  // a slice's key when it holds a NaN

// Bytes of the processed-logit, count and flag arrays; the greedy keys [rows][kGreedySlices]
// follow them.
size_t sampler_arrays_bytes(int64_t rows, int64_t vocab) {
  return static_cast<size_t>(rows) * static_cast<size_t>(padded_vocab(vocab)) * 12;
}

// The rows sampler_greedy_kernel decides: greedy, nothing to penalise or suppress, no logprobs.
__host__ __device__ __forceinline__ bool greedy_fast(const SamplerRowParams& rp) {
  return rp.greedy != 0 && rp.scaled == 0 && rp.logprobs < 0 && rp.prompt_begin == rp.prompt_end &&
         rp.output_begin == rp.output_end && rp.suppress_begin == rp.suppress_end;
}

// (value, id) as one key whose unsigned order is the argmax order: larger value, then lower id.
// Non-NaN v only; -0.0 and +0.0 compare equal as in the sequential argmax.
__device__ __forceinline__ unsigned long long greedy_key(float v, int id) {
  uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  b = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(b) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ float greedy_value(unsigned long long key) {
  const auto b = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((b & 0x80000000u) != 0 ? (b & 0x7FFFFFFFu) : ~b);
}

struct Smem {
  unsigned long long hist_lo[kBins];
  unsigned long long hist_hi[kBins];
  u128 stage[kWarps][32];
  double red_d[kWarps];
  long long red_i[kWarps];
  unsigned long long total_lo, total_hi;
  int digit;
  int found;
  u128 need;
  int list_count;
  int list_id[kSamplerMaxLogprobs];
};

// (z desc, id asc) as one unsigned key: larger key = earlier in the order. -0 counts as +0
// (the CPU compares with == and >). z must not be NaN.
__device__ __forceinline__ uint64_t rank_key(float z, int id) {
  const uint32_t b = z == 0.0f ? 0u : __float_as_uint(z);
  const uint32_t ordered = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

// floor(v * 2^90) (ceil when `up`) for a finite v >= 0.
__device__ u128 to_fixed(double v, bool up) {
  const auto bits = static_cast<uint64_t>(__double_as_longlong(v));
  const int exp_field = static_cast<int>((bits >> 52) & 0x7FF);
  if (exp_field == 0) return up && bits != 0 ? 1 : 0;  // subnormal: far below 2^-90
  const uint64_t mant = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int shift = exp_field - 1075 + 90;  // value * 2^90 = mant * 2^shift
  if (shift >= 0) return static_cast<u128>(mant) << shift;
  if (shift <= -64) return up ? 1 : 0;
  const u128 q = mant >> -shift;
  const bool rest = (mant & ((uint64_t{1} << -shift) - 1)) != 0;
  return q + (up && rest ? 1 : 0);
}

__device__ __forceinline__ double fixed_to_double(u128 v) {
  return (static_cast<double>(static_cast<uint64_t>(v >> 64)) * 0x1p64 +
          static_cast<double>(static_cast<uint64_t>(v))) *
         0x1p-90;
}

__device__ __forceinline__ void atomic_add_u128(unsigned long long* lo, unsigned long long* hi,
                                                u128 v) {
  const auto vlo = static_cast<unsigned long long>(v);
  const auto vhi = static_cast<unsigned long long>(v >> 64);
  const unsigned long long old = atomicAdd(lo, vlo);
  const unsigned long long carry = old + vlo < old ? 1 : 0;
  if (vhi + carry != 0) atomicAdd(hi, vhi + carry);
}

__device__ __forceinline__ u128 shfl_up_u128(u128 v, int off) {
  const auto lo = __shfl_up_sync(0xffffffffu, static_cast<unsigned long long>(v), off);
  const auto hi = __shfl_up_sync(0xffffffffu, static_cast<unsigned long long>(v >> 64), off);
  return (static_cast<u128>(hi) << 64) | lo;
}

// Candidate of the best (score desc, id asc); id < 0 = none.
struct Best {
  double score;
  int id;
};
__device__ __forceinline__ bool beats(double s, int i, const Best& b) {
  return b.id < 0 || s > b.score || (s == b.score && i < b.id);
}

__device__ Best block_best(Best b, Smem& sh) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const double s = __shfl_xor_sync(0xffffffffu, b.score, off);
    const int i = __shfl_xor_sync(0xffffffffu, b.id, off);
    if (i >= 0 && beats(s, i, b)) b = {s, i};
  }
  __syncthreads();
  if (lane == 0) {
    sh.red_d[warp] = b.score;
    sh.red_i[warp] = b.id;
  }
  __syncthreads();
  b = {sh.red_d[lane], static_cast<int>(sh.red_i[lane])};
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const double s = __shfl_xor_sync(0xffffffffu, b.score, off);
    const int i = __shfl_xor_sync(0xffffffffu, b.id, off);
    if (i >= 0 && beats(s, i, b)) b = {s, i};
  }
  return b;  // the same in every thread
}

__device__ long long block_sum_i(long long v, Smem& sh) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();
  if (lane == 0) sh.red_i[threadIdx.x >> 5] = v;
  __syncthreads();
  v = sh.red_i[lane];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// A sum in a fixed order (thread-strided partials, then xor trees): deterministic.
__device__ double block_sum_d(double v, Smem& sh) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();
  if (lane == 0) sh.red_d[threadIdx.x >> 5] = v;
  __syncthreads();
  v = sh.red_d[lane];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Adds `w` into bin `digit` (kNoBin = nothing), one atomic per group of lanes of the warp that
// hit the same bin. Every lane of the warp must call it.
__device__ __forceinline__ void warp_hist_add(int digit, u128 w, Smem& sh) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const unsigned peers = __match_any_sync(0xffffffffu, digit);
  sh.stage[warp][lane] = w;
  __syncwarp();
  if (digit != kNoBin && lane == __ffs(peers) - 1) {
    u128 s = 0;
    for (unsigned m = peers; m != 0; m &= m - 1)
      s += sh.stage[warp][__ffs(m) - 1];
    atomic_add_u128(&sh.hist_lo[digit], &sh.hist_hi[digit], s);
  }
  __syncwarp();
}

// The largest key k* among the candidates such that the weight of the candidates with key >= k*
// reaches `need` (> 0): with weight 1, the need-th largest key; with weight = mass, the top_p
// cut. Returns false when the total weight is below `need`.
template <typename Cand, typename Weight>
__device__ bool radix_find(const float* z, int vocab, u128 need, Cand cand, Weight weight, Smem& sh,
                           uint64_t& key_out) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  uint64_t prefix = 0;
  uint64_t mask = 0;
  const int iters = (vocab + kThreads - 1) / kThreads;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < kBins; b += kThreads) {
      sh.hist_lo[b] = 0;
      sh.hist_hi[b] = 0;
    }
    if (tid == 0) {
      sh.found = 0;
      sh.need = need;
    }
    __syncthreads();
    for (int j = 0; j < iters; ++j) {
      const int i = tid + j * kThreads;
      int digit = kNoBin;
      u128 w = 0;
      if (i < vocab) {
        const float v = z[i];
        if (cand(i, v)) {
          const uint64_t key = rank_key(v, i);
          if ((key & mask) == prefix) {
            digit = static_cast<int>((key >> shift) & 0xFF);
            w = weight(i, v);
          }
        }
      }
      warp_hist_add(digit, w, sh);
    }
    __syncthreads();
    if (tid < 32) {
      // Lane l holds bins 255 - 8l ... 248 - 8l (descending key order).
      u128 bins[8];
      u128 own = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int b = kBins - 1 - 8 * lane - e;
        bins[e] = (static_cast<u128>(sh.hist_hi[b]) << 64) | sh.hist_lo[b];
        own += bins[e];
      }
      u128 incl = own;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const u128 t = shfl_up_u128(incl, off);
        if (lane >= off) incl += t;
      }
      u128 cum = incl - own;
      if (cum < need && incl >= need) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (cum + bins[e] >= need) {
            sh.digit = kBins - 1 - 8 * lane - e;
            sh.need = need - cum;
            sh.found = 1;
            break;
          }
          cum += bins[e];
        }
      }
    }
    __syncthreads();
    const bool found = sh.found != 0;
    const int digit = sh.digit;
    need = sh.need;
    __syncthreads();
    if (!found) return false;
    prefix |= static_cast<uint64_t>(digit) << shift;
    mask |= uint64_t{0xFF} << shift;
  }
  key_out = prefix;
  return true;
}

struct Workspace {
  float* values;
  int32_t* counts;
  uint32_t* flags;
};

__device__ void finish(const SamplerParams& p, int64_t row, int64_t token, SamplerStatus st) {
  if (threadIdx.x == 0) {
    p.tokens[row] = token;
    p.status[row] = static_cast<int32_t>(st);
  }
}

// Block-strided loop over one id range of the row's lists.
template <typename Fn>
__device__ __forceinline__ void for_ids(const int64_t* ids, int64_t begin, int64_t end, Fn fn) {
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
    fn(static_cast<int>(ids[i]));
}

// Logprobs of the raw logits (sampling/logprobs.cc); status kOk so far. Returns the status.
__device__ SamplerStatus row_logprobs(const SamplerParams& p, int64_t row, const float* raw,
                                      int vocab, int top_n, int token, Smem& sh) {
  const int tid = static_cast<int>(threadIdx.x);
  Best mx{0.0, -1};
  bool invalid = false;
  for (int i = tid; i < vocab; i += kThreads) {
    const float v = raw[i];
    invalid |= isnan(v) || v == kPosInf;
    if (!isnan(v) && beats(v, i, mx)) mx = {v, i};
  }
  if (__syncthreads_or(invalid)) return SamplerStatus::kInfinite;
  mx = block_best(mx, sh);
  if (mx.score == static_cast<double>(kNegInf)) return SamplerStatus::kAllMasked;
  const double dmax = mx.score;
  double sum = 0;
  long long above = 0;
  const uint64_t token_key = rank_key(raw[token], token);
  for (int i = tid; i < vocab; i += kThreads) {
    const float v = raw[i];
    sum += exp(static_cast<double>(v) - dmax);
    above += rank_key(v, i) > token_key ? 1 : 0;
  }
  sum = block_sum_d(sum, sh);
  above = block_sum_i(above, sh);
  const double lse = dmax + log(sum);
  if (tid == 0) {
    p.token_logprob[row] = static_cast<double>(raw[token]) - lse;
    p.token_rank[row] = above + 1;
    sh.list_count = 0;
  }
  uint64_t kth = ~uint64_t{0};
  if (top_n > 0) {
    radix_find(
        raw, vocab, static_cast<u128>(top_n), [](int, float) { return true; },
        [](int, float) { return static_cast<u128>(1); }, sh, kth);
    for (int i = tid; i < vocab; i += kThreads) {
      if (rank_key(raw[i], i) >= kth) sh.list_id[atomicAdd(&sh.list_count, 1)] = i;
    }
  }
  __syncthreads();
  if (tid == 0) {
    // Insertion sort of the (at most 20) top ids in rank order.
    const int n = sh.list_count;
    for (int a = 1; a < n; ++a) {
      const int id = sh.list_id[a];
      const uint64_t k = rank_key(raw[id], id);
      int b = a;
      while (b > 0 && rank_key(raw[sh.list_id[b - 1]], sh.list_id[b - 1]) < k) {
        sh.list_id[b] = sh.list_id[b - 1];
        --b;
      }
      sh.list_id[b] = id;
    }
    for (int r = 0; r < kSamplerMaxLogprobs; ++r) {
      const bool has = r < n;
      p.top_ids[row * kSamplerMaxLogprobs + r] = has ? sh.list_id[r] : -1;
      p.top_logprobs[row * kSamplerMaxLogprobs + r] =
          has ? static_cast<double>(raw[sh.list_id[r]]) - lse : 0.0;
    }
  }
  return SamplerStatus::kOk;
}

// grid (rows, kGreedySlices): slice `blockIdx.y` of a greedy_fast row's raw logits -> the best
// key of the slice (kGreedyNaN when it holds a NaN) in keys[row][slice]. Other rows: nothing.
__global__ void __launch_bounds__(kGreedyThreads)
    sampler_greedy_kernel(SamplerParams p, int64_t logits_stride, unsigned long long* keys) {
  const int64_t row = blockIdx.x;
  if (!greedy_fast(p.row_params[row])) return;
  const int vocab = static_cast<int>(p.vocab);
  const float* raw =
      p.logits + (p.logits_rows != nullptr ? p.logits_rows[row] : row) * logits_stride;
  const int per = (vocab + kGreedySlices - 1) / kGreedySlices;
  const int begin = static_cast<int>(blockIdx.y) * per, end = min(vocab, begin + per);
  unsigned long long best = 0;  // below every key of a real element
  bool nan = false;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kGreedyThreads) {
    const float v = raw[i];
    if (isnan(v)) {
      nan = true;
    } else {
      best = max(best, greedy_key(v, i));
    }
  }
  if (nan) best = kGreedyNaN;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    best = max(best, __shfl_xor_sync(0xffffffffu, best, off));
  __shared__ unsigned long long warp_best[kGreedyThreads / 32];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kGreedyThreads / 32; ++w)
      best = max(best, warp_best[w]);
    keys[row * kGreedySlices + blockIdx.y] = best;
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    sampler_kernel(SamplerParams p, int64_t logits_stride, int64_t padded,
                   const unsigned long long* greedy_keys) {
  __shared__ Smem sh;
  const int64_t row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const SamplerRowParams rp = p.row_params[row];
  if (greedy_fast(rp)) {  // sampler_greedy_kernel's slices: their maximum is the argmax
    if (tid < 32) {
      unsigned long long k = tid < kGreedySlices ? greedy_keys[row * kGreedySlices + tid] : 0ull;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1)
        k = max(k, __shfl_xor_sync(0xffffffffu, k, off));
      if (tid == 0) {
        const bool all_masked = k == 0ull || greedy_value(k) == kNegInf;
        const SamplerStatus st = k == kGreedyNaN ? SamplerStatus::kNaN
                                 : all_masked    ? SamplerStatus::kAllMasked
                                                 : SamplerStatus::kOk;
        p.tokens[row] = st == SamplerStatus::kOk
                            ? static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(k))
                            : -1;
        p.status[row] = static_cast<int32_t>(st);
      }
    }
    return;
  }
  const int vocab = static_cast<int>(p.vocab);
  const float* raw =
      p.logits + (p.logits_rows != nullptr ? p.logits_rows[row] : row) * logits_stride;
  auto* base = static_cast<unsigned char*>(p.workspace);
  Workspace ws{reinterpret_cast<float*>(base) + row * padded,
               reinterpret_cast<int32_t*>(base + 4 * p.rows * padded) + row * padded,
               reinterpret_cast<uint32_t*>(base + 8 * p.rows * padded) + row * padded};
  float* z = ws.values;

  // Ids of the lists in range (the CPU throws on any other).
  bool bad = false;
  auto check = [&](int64_t b, int64_t e) {
    for (int64_t i = b + tid; i < e; i += kThreads)
      bad |= p.ids[i] < 0 || p.ids[i] >= p.vocab;
  };
  check(rp.prompt_begin, rp.prompt_end);
  check(rp.output_begin, rp.output_end);
  check(rp.suppress_begin, rp.suppress_end);
  if (__syncthreads_or(bad)) return finish(p, row, -1, SamplerStatus::kBadTokenId);

  // 1. Copy, min_tokens suppression, penalties.
  for (int i = tid; i < vocab; i += kThreads)
    z[i] = raw[i];
  const bool rep = rp.penalties != 0 && rp.repetition != 1.0f;
  const bool freq = rp.penalties != 0 && (rp.frequency != 0.0f || rp.presence != 0.0f);
  if (rep || freq) {
    auto clear = [&](int id) {
      ws.flags[id] = 0;
      ws.counts[id] = 0;
    };
    for_ids(p.ids, rp.prompt_begin, rp.prompt_end, clear);
    for_ids(p.ids, rp.output_begin, rp.output_end, clear);
  }
  __syncthreads();
  for_ids(p.ids, rp.suppress_begin, rp.suppress_end, [&](int id) { z[id] = kNegInf; });
  __syncthreads();
  if (rep) {
    auto penalise_once = [&](int id) {
      if ((atomicOr(&ws.flags[id], 1u) & 1u) == 0) {
        const float l = z[id];
        z[id] = __fmul_rn(l, l > 0.0f ? rp.inv_repetition : rp.repetition);
      }
    };
    for_ids(p.ids, rp.prompt_begin, rp.prompt_end, penalise_once);
    for_ids(p.ids, rp.output_begin, rp.output_end, penalise_once);
  }
  if (freq) {
    for_ids(p.ids, rp.output_begin, rp.output_end, [&](int id) { atomicAdd(&ws.counts[id], 1); });
  }
  __syncthreads();
  if (freq) {
    for_ids(p.ids, rp.output_begin, rp.output_end, [&](int id) {
      if ((atomicOr(&ws.flags[id], 2u) & 2u) == 0) {
        float l = z[id];
        l = __fsub_rn(l, __fmul_rn(rp.frequency, static_cast<float>(ws.counts[id])));
        l = __fsub_rn(l, rp.presence);
        z[id] = l;
      }
    });
  }
  __syncthreads();

  // 2. Temperature, max, greedy argmax.
  Best mx{0.0, -1};
  bool nan = false;
  for (int i = tid; i < vocab; i += kThreads) {
    float v = z[i];
    if (rp.scaled != 0) {
      v = __fdiv_rn(v, rp.temperature);
      z[i] = v;
    }
    if (isnan(v)) {
      nan = true;
    } else if (beats(v, i, mx)) {
      mx = {v, i};
    }
  }
  if (__syncthreads_or(nan)) return finish(p, row, -1, SamplerStatus::kNaN);
  mx = block_best(mx, sh);
  if (mx.id < 0 || mx.score == static_cast<double>(kNegInf)) {
    return finish(p, row, -1, SamplerStatus::kAllMasked);
  }
  int token = mx.id;
  if (rp.greedy == 0) {
    if (mx.score == static_cast<double>(kPosInf)) {
      return finish(p, row, -1, SamplerStatus::kInfinite);
    }
    const double z_max = mx.score;
    const double log_min_p = rp.log_min_p;
    auto eligible = [=](int, float v) {
      return v != kNegInf && static_cast<double>(v) - z_max >= log_min_p;
    };

    // 3. top_k: the top_k-th key among the eligible tokens.
    uint64_t cut = 0;  // keep keys >= cut (0 keeps everything)
    if (rp.top_k > 0) {
      long long count = 0;
      for (int i = tid; i < vocab; i += kThreads)
        count += eligible(i, z[i]) ? 1 : 0;
      count = block_sum_i(count, sh);
      if (rp.top_k < count) {
        radix_find(
            z, vocab, static_cast<u128>(rp.top_k), eligible,
            [](int, float) { return static_cast<u128>(1); }, sh, cut);
      }
    }

    // 4. top_p over what top_k kept.
    if (rp.top_p < 1.0) {
      const uint64_t k_cut = cut;
      auto kept = [=](int i, float v) { return eligible(i, v) && rank_key(v, i) >= k_cut; };
      auto mass = [=](int, float v) {
        return to_fixed(exp(static_cast<double>(v) - z_max), false);
      };
      if (tid == 0) {
        sh.total_lo = 0;
        sh.total_hi = 0;
      }
      __syncthreads();
      u128 local = 0;
      for (int i = tid; i < vocab; i += kThreads) {
        const float v = z[i];
        if (kept(i, v)) local += mass(i, v);
      }
      atomic_add_u128(&sh.total_lo, &sh.total_hi, local);
      __syncthreads();
      const u128 total = (static_cast<u128>(sh.total_hi) << 64) | sh.total_lo;
      const double target = rp.top_p * fixed_to_double(total);
      u128 need = to_fixed(target, true);
      if (need == 0) need = 1;
      uint64_t p_cut = 0;
      if (radix_find(z, vocab, need, kept, mass, sh, p_cut)) cut = p_cut;
    }

    // 5. Exponential race over the kept tokens, 4 lanes per Philox call.
    const Philox4x32Key key = noise_key(rp.seed);
    const auto position = static_cast<uint64_t>(rp.position);
    Best best{0.0, -1};
    const int groups = (vocab + 3) / 4;
    for (int g = tid; g < groups; g += kThreads) {
      const Philox4x32Counter bits = philox4x32(
          noise_counter(NoiseStream::kSample, position, static_cast<uint64_t>(g) * 4), key);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 4 * g + e;
        if (i >= vocab) break;
        const float v = z[i];
        if (!eligible(i, v) || rank_key(v, i) < cut) continue;
        const double score =
            exp(static_cast<double>(v) - z_max) / -log(uniform_from_bits(bits.v[e]));
        if (beats(score, i, best)) best = {score, i};
      }
    }
    best = block_best(best, sh);
    if (best.id < 0) return finish(p, row, -1, SamplerStatus::kNoCandidate);
    token = best.id;
  }

  // 6. Logprobs of the raw logits.
  if (rp.logprobs >= 0) {
    const SamplerStatus st = row_logprobs(p, row, raw, vocab, rp.logprobs, token, sh);
    if (st != SamplerStatus::kOk) return finish(p, row, -1, st);
  }
  finish(p, row, token, SamplerStatus::kOk);
}

}  // namespace

size_t sampler_workspace_bytes(int64_t rows, int64_t vocab) {
  DI_CHECK(rows >= 0 && vocab > 0, "sampler_workspace_bytes: bad shape [rows {}, vocab {}]", rows,
           vocab);
  return sampler_arrays_bytes(rows, vocab) +
         static_cast<size_t>(rows) * kGreedySlices * sizeof(unsigned long long);
}

SamplerRowParams make_sampler_row(const deepinfer::SamplingParams& params, uint64_t seed,
                                  int64_t position, std::span<const int64_t> prompt_ids,
                                  std::span<const int64_t> output_ids,
                                  std::span<const int64_t> eos_ids, bool suppress_stop_tokens,
                                  int64_t vocab, std::vector<int64_t>& ids) {
  DI_CHECK(vocab > 0 && vocab <= INT32_MAX, "sampler: bad vocabulary size {}", vocab);
  DI_CHECK(position >= 0, "sampler: position must be >= 0, got {}", position);
  SamplerRowParams r;
  r.seed = seed;
  r.position = position;
  r.greedy = params.greedy() ? 1 : 0;
  r.scaled = !params.greedy() && params.temperature != 1.0 ? 1 : 0;
  r.temperature = static_cast<float>(params.temperature);
  r.repetition = static_cast<float>(params.repetition_penalty);
  r.inv_repetition = 1.0f / r.repetition;
  r.frequency = static_cast<float>(params.frequency_penalty);
  r.presence = static_cast<float>(params.presence_penalty);
  r.penalties = params.repetition_penalty != 1.0 || params.frequency_penalty != 0.0 ||
                        params.presence_penalty != 0.0
                    ? 1
                    : 0;
  r.log_min_p =
      params.min_p > 0 ? std::log(params.min_p) : -std::numeric_limits<double>::infinity();
  r.top_p = params.top_p;
  r.top_k = params.top_k > 0 && params.top_k < vocab ? params.top_k : 0;
  if (params.logprobs) {
    DI_CHECK(*params.logprobs >= 0 && *params.logprobs <= kSamplerMaxLogprobs &&
                 *params.logprobs <= vocab,
             "sampler: logprobs {} out of range [0, min({}, {})]", *params.logprobs,
             kSamplerMaxLogprobs, vocab);
    r.logprobs = static_cast<int32_t>(*params.logprobs);
  }
  auto append = [&](std::span<const int64_t> src, int64_t& b, int64_t& e) {
    b = static_cast<int64_t>(ids.size());
    ids.insert(ids.end(), src.begin(), src.end());
    e = static_cast<int64_t>(ids.size());
  };
  // Only the lists the row's penalties read (the CPU checks the ids of those alone; a long
  // prompt without a repetition penalty uploads nothing).
  const bool rep = r.penalties != 0 && r.repetition != 1.0f;
  const bool counted = r.penalties != 0 && (r.frequency != 0.0f || r.presence != 0.0f);
  append(rep ? prompt_ids : std::span<const int64_t>{}, r.prompt_begin, r.prompt_end);
  append(rep || counted ? output_ids : std::span<const int64_t>{}, r.output_begin, r.output_end);
  r.suppress_begin = static_cast<int64_t>(ids.size());
  if (suppress_stop_tokens) {
    ids.insert(ids.end(), eos_ids.begin(), eos_ids.end());
    ids.insert(ids.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
  }
  r.suppress_end = static_cast<int64_t>(ids.size());
  return r;
}

void sample_rows(const SamplerParams& p, cudaStream_t stream) {
  const int64_t stride = p.logits_stride != 0 ? p.logits_stride : p.vocab;
  DI_CHECK(p.rows >= 0 && p.rows <= INT32_MAX && p.vocab > 0 && p.vocab <= INT32_MAX,
           "sample_rows: bad shape [rows {}, vocab {}]", p.rows, p.vocab);
  DI_CHECK(stride >= p.vocab, "sample_rows: logits row stride {} < vocab {}", stride, p.vocab);
  if (p.rows == 0) return;
  DI_CHECK(p.logits != nullptr && p.row_params != nullptr && p.workspace != nullptr &&
               p.tokens != nullptr && p.status != nullptr,
           "sample_rows: null logits/row_params/workspace/tokens/status ({} rows x {})", p.rows,
           p.vocab);
  DI_CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0,
           "sample_rows: workspace must be 256-byte aligned ({} bytes for {} rows x {})",
           sampler_workspace_bytes(p.rows, p.vocab), p.rows, p.vocab);
  auto* keys = reinterpret_cast<unsigned long long*>(static_cast<unsigned char*>(p.workspace) +
                                                     sampler_arrays_bytes(p.rows, p.vocab));
  sampler_greedy_kernel<<<dim3(static_cast<unsigned>(p.rows), kGreedySlices), kGreedyThreads, 0,
                          stream>>>(p, stride, keys);
  DI_CUDA_CHECK(cudaGetLastError());
  sampler_kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(
      p, stride, padded_vocab(p.vocab), keys);
  DI_CUDA_CHECK(cudaGetLastError());
}

std::string sampler_status_message(int32_t status) {
  static constexpr const char* kWhat[] = {
      "ok",
      "logits row contains NaN",
      "every token of the row is -inf (all suppressed?)",
      "logits overflow to +inf (after temperature, or raw logits with logprobs)",
      "sampler found no candidate",
      "a prompt/output/stop token id is outside the vocabulary"};
  if (status < 0 || status > 5) return fmt::format("unknown sampler status {}", status);
  return kWhat[status];
}

void check_sampler_status(std::span<const int32_t> status) {
  for (size_t r = 0; r < status.size(); ++r) {
    if (status[r] != 0) DI_FAIL("sample_rows: row {}: {}", r, sampler_status_message(status[r]));
  }
}

SamplerOutputBlock::SamplerOutputBlock(int64_t rows) : rows_(rows) {
  DI_CHECK(rows >= 0, "SamplerOutputBlock: bad row count {}", rows);
  const auto n = static_cast<size_t>(rows);
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t off = at;
    at += (bytes + 15) / 16 * 16;
    return off;
  };
  tokens_ = take(n * 8);
  token_logprob_ = take(n * 8);
  token_rank_ = take(n * 8);
  top_ids_ = take(n * kSamplerMaxLogprobs * 8);
  top_logprobs_ = take(n * kSamplerMaxLogprobs * 8);
  status_ = take(n * 4);
  bytes_ = at;
}

void SamplerOutputBlock::bind(SamplerParams& p, void* device_block) const {
  auto* b = static_cast<std::byte*>(device_block);
  p.tokens = reinterpret_cast<int64_t*>(b + tokens_);
  p.token_logprob = reinterpret_cast<double*>(b + token_logprob_);
  p.token_rank = reinterpret_cast<int64_t*>(b + token_rank_);
  p.top_ids = reinterpret_cast<int64_t*>(b + top_ids_);
  p.top_logprobs = reinterpret_cast<double*>(b + top_logprobs_);
  p.status = reinterpret_cast<int32_t*>(b + status_);
}

SampleOutcome SamplerOutputBlock::row(std::span<const std::byte> host, int64_t r,
                                      int32_t logprobs) const {
  DI_CHECK(host.size() >= bytes_ && r >= 0 && r < rows_ && logprobs <= kSamplerMaxLogprobs,
           "SamplerOutputBlock::row: row {} of {}, {} bytes of {}, logprobs {}", r, rows_,
           host.size(), bytes_, logprobs);
  auto get = [&](size_t off, int64_t i, auto v) {
    std::memcpy(&v, host.data() + off + static_cast<size_t>(i) * sizeof(v), sizeof(v));
    return v;
  };
  SampleOutcome out;
  const int32_t status = get(status_, r, int32_t{});
  if (status != 0) {
    out.error = sampler_status_message(status);
    return out;
  }
  out.result.token_id = get(tokens_, r, int64_t{});
  if (logprobs >= 0) {
    RowLogprobs lp;
    lp.token = {out.result.token_id, get(token_logprob_, r, double{}),
                get(token_rank_, r, int64_t{})};
    for (int32_t k = 0; k < logprobs; ++k) {
      const int64_t at = r * kSamplerMaxLogprobs + k;
      lp.top.push_back({get(top_ids_, at, int64_t{}), get(top_logprobs_, at, double{}), k + 1});
    }
    out.result.logprobs = std::move(lp);
  }
  return out;
}

}  // namespace di
