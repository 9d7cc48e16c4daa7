// Compressors of the kv-source owners (kernels/params/kv_write.h), one CTA of 128 threads per
// emitted group: pool (ratio 2: per-channel softmax over the two tokens of the group), comp_norm,
// pre-RoPE latent out (fp32, for the index keys), RoPE at the group's first position, FP4 e2m1 with
// E4M3 scales per 16, 288-byte entry appended at the group index. Plus the host plan that pairs
// the rows of a ratio-2 sequence across chunks (plan_compressor). Other widths
// (CompressRatio*Params::dim / rope_dim) run the *_generic kernels: the same steps on a row in
// dynamic shared memory (kv_write.cuh *_generic helpers).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/kv_write/kv_write.cuh"
#include "kernels/cuda/paged_table_check.h"
#include "kernels/cuda/pdl.cuh"

namespace di {

CompressorPlan plan_compressor(int ratio, std::span<const int32_t> seq,
                               std::span<const int64_t> positions,
                               std::span<const int32_t> state_rows) {
  DI_CHECK(ratio == 1 || ratio == 2, "plan_compressor: ratio must be 1 or 2, got {}", ratio);
  DI_CHECK(seq.size() == positions.size(), "plan_compressor: {} seq entries for {} positions",
           seq.size(), positions.size());
  const auto rows = static_cast<int64_t>(seq.size());
  DI_CHECK(rows <= INT32_MAX, "plan_compressor: {} rows", rows);
  CompressorPlan plan;
  // (seq, position, row) sorted: each sequence's rows become one ascending run.
  std::vector<std::pair<std::pair<int32_t, int64_t>, int32_t>> order;
  order.reserve(seq.size());
  for (int64_t r = 0; r < rows; ++r) {
    const auto i = static_cast<size_t>(r);
    DI_CHECK(seq[i] >= 0 && positions[i] >= 0 && positions[i] < (int64_t{1} << 24),
             "plan_compressor: row {} has seq {} position {}", r, seq[i], positions[i]);
    order.push_back({{seq[i], positions[i]}, static_cast<int32_t>(r)});
  }
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& a = order[i - 1].first;
    const auto& b = order[i].first;
    DI_CHECK(a.first != b.first || b.second == a.second + 1,
             "plan_compressor: sequence {} positions {} and {} are not consecutive", a.first,
             a.second, b.second);
  }
  if (ratio == 1) {
    plan.group_seq.assign(seq.begin(), seq.end());
    plan.group_index.assign(positions.begin(), positions.end());
    return plan;
  }
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin;
    while (end < order.size() && order[end].first.first == order[begin].first.first)
      ++end;
    const int32_t s = order[begin].first.first;
    DI_CHECK(static_cast<size_t>(s) < state_rows.size(),
             "plan_compressor: sequence {} has no state row ({} given)", s, state_rows.size());
    const int64_t first = order[begin].first.second;
    auto row_at = [&](int64_t p) { return order[begin + static_cast<size_t>(p - first)].second; };
    const int64_t last = order[end - 1].first.second;
    Ratio2Work tail;
    tail.seq = s;
    tail.state_row = state_rows[static_cast<size_t>(s)];
    tail.tail_last = row_at(last);
    tail.tail_last_slot = static_cast<int32_t>(last % 2);
    tail.tail_prev = last > first ? row_at(last - 1) : -1;
    // The tail goes to the item that reads the carried slot (the first group, when its even
    // position precedes this batch), else to the sequence's last group, else to an item of its
    // own: the sequence's state is then touched by one CTA only.
    const size_t first_item = plan.work.size();
    bool carried = false;
    for (int64_t p = first; p <= last; ++p) {
      if (p % 2 == 0) continue;
      Ratio2Work w;
      w.seq = s;
      w.state_row = tail.state_row;
      w.group = p / 2;
      w.row_odd = row_at(p);
      w.row_even = p > first ? row_at(p - 1) : -1;
      carried = carried || w.row_even < 0;
      w.latent_row = static_cast<int32_t>(plan.group_index.size());
      plan.work.push_back(w);
      plan.group_seq.push_back(s);
      plan.group_index.push_back(w.group);
    }
    const bool has_group = plan.work.size() > first_item;
    Ratio2Work& owner = !has_group ? plan.work.emplace_back(tail)
                        : carried  ? plan.work[first_item]
                                   : plan.work.back();
    owner.tail_last = tail.tail_last;
    owner.tail_last_slot = tail.tail_last_slot;
    owner.tail_prev = tail.tail_prev;
    begin = end;
  }
  return plan;
}

namespace {

using kv_write_detail::kThreads;

template <typename T>
__global__ void __launch_bounds__(kThreads) compress_ratio1_kernel(CompressRatio1Params p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ __align__(16) float row[kKvDim];
  __shared__ float scale;
  const int64_t r = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  *reinterpret_cast<float4*>(row + 4 * tid) = kv_write_detail::load_row4(x, tid);
  __syncthreads();
  kv_write_detail::rms_norm_row512(row, p.norm_weight, p.eps, &scale);
  *reinterpret_cast<float4*>(p.latent + r * kKvDim + 4 * tid) =
      *reinterpret_cast<const float4*>(row + 4 * tid);
  __syncthreads();  // every thread has read its latent values before RoPE rewrites the tail
  const int64_t pos = p.positions[r];  // ratio 1: group index = position
  kv_write_detail::rope_row512(row, pos, p.freqs);
  kv_write_detail::store_comp_entry(row, paged_entry(p.table, p.seq[r], pos));
}

// Per channel, exactly Model<float>::compress for ratio 2: m = max over the slots (std::max order
// from -inf), den = 0 + e0 + e1, acc = 0 + kv0 * (e0 / den) + kv1 * (e1 / den), with
// e = fp32(exp(double(s - m))) (correctly rounded but for rare ties; glibc's expf likewise).
__device__ __forceinline__ float pool2(float kv0, float kv1, float s0, float s1) {
  float m = -INFINITY;
  m = m < s0 ? s0 : m;
  m = m < s1 ? s1 : m;
  const auto ex = [](float v) { return static_cast<float>(exp(static_cast<double>(v))); };
  const float e0 = ex(__fsub_rn(s0, m));
  const float e1 = ex(__fsub_rn(s1, m));
  const float den = __fadd_rn(__fadd_rn(0.0f, e0), e1);
  const float p0 = __fdiv_rn(e0, den);
  const float p1 = __fdiv_rn(e1, den);
  return __fadd_rn(__fadd_rn(0.0f, __fmul_rn(kv0, p0)), __fmul_rn(kv1, p1));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) compress_ratio2_kernel(CompressRatio2Params p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ __align__(16) float row[kKvDim];
  __shared__ float scale;
  const Ratio2Work w = p.work[blockIdx.x];
  const int tid = static_cast<int>(threadIdx.x);
  const T* kv = static_cast<const T*>(p.kv);
  const T* score = static_cast<const T*>(p.score);
  float* state = p.state + static_cast<int64_t>(w.state_row) * kRatio2StateFloats;
  // state[kind][slot][512]: kind 0 = kv, 1 = score.
  auto state_at = [&](int kind, int slot) { return state + (kind * 2 + slot) * kKvDim; };

  if (w.row_odd >= 0) {  // uniform over the CTA
    float4 kv0, s0;
    if (w.row_even >= 0) {
      kv0 = kv_write_detail::load_row4(kv + w.row_even * p.x_stride, tid);
      s0 = kv_write_detail::load_row4(score + w.row_even * p.x_stride, tid);
    } else {  // the even position came in an earlier launch: carried slot 0
      kv0 = *reinterpret_cast<const float4*>(state_at(0, 0) + 4 * tid);
      s0 = *reinterpret_cast<const float4*>(state_at(1, 0) + 4 * tid);
    }
    const float4 kv1 = kv_write_detail::load_row4(kv + w.row_odd * p.x_stride, tid);
    const float4 s1 = kv_write_detail::load_row4(score + w.row_odd * p.x_stride, tid);
    *reinterpret_cast<float4*>(row + 4 * tid) =
        make_float4(pool2(kv0.x, kv1.x, s0.x, s1.x), pool2(kv0.y, kv1.y, s0.y, s1.y),
                    pool2(kv0.z, kv1.z, s0.z, s1.z), pool2(kv0.w, kv1.w, s0.w, s1.w));
    __syncthreads();
    kv_write_detail::rms_norm_row512(row, p.norm_weight, p.eps, &scale);
    *reinterpret_cast<float4*>(p.latent + static_cast<int64_t>(w.latent_row) * kKvDim + 4 * tid) =
        *reinterpret_cast<const float4*>(row + 4 * tid);
    __syncthreads();  // every thread has read its latent values before RoPE rewrites the tail
    kv_write_detail::rope_row512(row, 2 * w.group, p.freqs);
    kv_write_detail::store_comp_entry(row, paged_entry(p.table, w.seq, w.group));
  }
  if (w.tail_last >= 0) {
    // Every thread re-reads only its own 4 values of the carried slot above, but the barrier
    // keeps the ordering obvious (and costs nothing next to the rest).
    __syncthreads();
    const auto store_slot = [&](int32_t src_row, int slot) {
      *reinterpret_cast<float4*>(state_at(0, slot) + 4 * tid) =
          kv_write_detail::load_row4(kv + src_row * p.x_stride, tid);
      *reinterpret_cast<float4*>(state_at(1, slot) + 4 * tid) =
          kv_write_detail::load_row4(score + src_row * p.x_stride, tid);
    };
    store_slot(w.tail_last, w.tail_last_slot);
    if (w.tail_prev >= 0) store_slot(w.tail_prev, 1 - w.tail_last_slot);
  }
}

// Any supported width: compress_ratio1_kernel's steps on a row of p.dim floats.
template <typename T>
__global__ void __launch_bounds__(kThreads) compress_ratio1_generic_kernel(CompressRatio1Params p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ __align__(16) float row_dyn[];  // [dim]
  __shared__ float scale;
  const int64_t r = blockIdx.x;
  const int dim = p.dim;
  kv_write_detail::load_row_generic(static_cast<const T*>(p.x) + r * p.x_stride, row_dyn, dim);
  kv_write_detail::rms_norm_row_generic(row_dyn, p.norm_weight, dim, p.eps, &scale);
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += kThreads)
    p.latent[r * dim + i] = row_dyn[i];
  __syncthreads();  // every thread has read its latent values before RoPE rewrites the tail
  const int64_t pos = p.positions[r];  // ratio 1: group index = position
  kv_write_detail::rope_row_generic(row_dyn, dim, p.rope_dim, pos, p.freqs);
  kv_write_detail::store_comp_entry_generic(row_dyn, dim, paged_entry(p.table, p.seq[r], pos));
}

// Any supported width: compress_ratio2_kernel's steps, state rows of ratio2_state_floats(dim).
template <typename T>
__global__ void __launch_bounds__(kThreads) compress_ratio2_generic_kernel(CompressRatio2Params p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ __align__(16) float row_dyn[];  // [dim]
  __shared__ float scale;
  const Ratio2Work w = p.work[blockIdx.x];
  const int tid = static_cast<int>(threadIdx.x);
  const int dim = p.dim;
  const T* kv = static_cast<const T*>(p.kv);
  const T* score = static_cast<const T*>(p.score);
  float* state = p.state + static_cast<int64_t>(w.state_row) * ratio2_state_floats(dim);
  // state[kind][slot][dim]: kind 0 = kv, 1 = score.
  auto state_at = [&](int kind, int slot) { return state + (kind * 2 + slot) * dim; };
  using ops_detail::to_float;

  if (w.row_odd >= 0) {  // uniform over the CTA
    for (int i = tid; i < dim; i += kThreads) {
      float kv0, s0;
      if (w.row_even >= 0) {
        kv0 = to_float(kv[w.row_even * p.x_stride + i]);
        s0 = to_float(score[w.row_even * p.x_stride + i]);
      } else {  // the even position came in an earlier launch: carried slot 0
        kv0 = state_at(0, 0)[i];
        s0 = state_at(1, 0)[i];
      }
      const float kv1 = to_float(kv[w.row_odd * p.x_stride + i]);
      const float s1 = to_float(score[w.row_odd * p.x_stride + i]);
      row_dyn[i] = pool2(kv0, kv1, s0, s1);
    }
    __syncthreads();
    kv_write_detail::rms_norm_row_generic(row_dyn, p.norm_weight, dim, p.eps, &scale);
    for (int i = tid; i < dim; i += kThreads)
      p.latent[static_cast<int64_t>(w.latent_row) * dim + i] = row_dyn[i];
    __syncthreads();  // every thread has read its latent values before RoPE rewrites the tail
    kv_write_detail::rope_row_generic(row_dyn, dim, p.rope_dim, 2 * w.group, p.freqs);
    kv_write_detail::store_comp_entry_generic(row_dyn, dim, paged_entry(p.table, w.seq, w.group));
  }
  if (w.tail_last >= 0) {
    // The carried slot 0 read above is rewritten here, possibly by another thread: barrier.
    __syncthreads();
    const auto store_slot = [&](int32_t src_row, int slot) {
      for (int i = tid; i < dim; i += kThreads) {
        state_at(0, slot)[i] = to_float(kv[src_row * p.x_stride + i]);
        state_at(1, slot)[i] = to_float(score[src_row * p.x_stride + i]);
      }
    };
    store_slot(w.tail_last, w.tail_last_slot);
    if (w.tail_prev >= 0) store_slot(w.tail_prev, 1 - w.tail_last_slot);
  }
}

void check_common(const char* op, const float* norm_weight, const float* freqs, float eps,
                  int64_t n) {
  DI_CHECK(eps >= 0.0f, "{}: eps must be >= 0, got {}", op, eps);
  DI_CHECK(n == 0 || (norm_weight != nullptr && freqs != nullptr),
           "{}: null norm_weight/freqs ({} rows)", op, n);
  DI_CHECK(reinterpret_cast<uintptr_t>(norm_weight) % 16 == 0,
           "{}: norm_weight must be 16-byte aligned", op);
}

}  // namespace

void compress_ratio1(const CompressRatio1Params& p, cudaStream_t stream) {
  const bool production =
      kv_write_detail::check_width("compress_ratio1", p.dim, p.rope_dim, kKvDim);
  const int64_t stride = p.x_stride != 0 ? p.x_stride : p.dim;
  kv_write_detail::check_act("compress_ratio1", p.x, p.rows, stride, p.dim, p.precision);
  check_paged_table("compress_ratio1", p.table, comp_entry_bytes(p.dim));
  check_common("compress_ratio1", p.norm_weight, p.freqs, p.eps, p.rows);
  if (p.rows == 0) return;
  DI_CHECK(p.seq != nullptr && p.positions != nullptr && p.latent != nullptr &&
               reinterpret_cast<uintptr_t>(p.latent) % 16 == 0,
           "compress_ratio1: null seq/positions or null/unaligned latent ({} rows)", p.rows);
  CompressRatio1Params q = p;
  q.x_stride = stride;
  const auto grid = static_cast<unsigned>(p.rows);
  const bool f32 = p.precision == ActPrecision::kF32;
  if (production) {
    if (f32) {
      cuda_detail::launch_pdl(compress_ratio1_kernel<float>, grid, kThreads, 0, stream, q);
    } else {
      cuda_detail::launch_pdl(compress_ratio1_kernel<uint16_t>, grid, kThreads, 0, stream, q);
    }
  } else {
    const size_t smem = static_cast<size_t>(p.dim) * sizeof(float);
    if (f32) {
      cuda_detail::launch_pdl(compress_ratio1_generic_kernel<float>, grid, kThreads, smem, stream,
                              q);
    } else {
      cuda_detail::launch_pdl(compress_ratio1_generic_kernel<uint16_t>, grid, kThreads, smem,
                              stream, q);
    }
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

void compress_ratio2(const CompressRatio2Params& p, cudaStream_t stream) {
  const bool production =
      kv_write_detail::check_width("compress_ratio2", p.dim, p.rope_dim, kKvDim);
  const int64_t stride = p.x_stride != 0 ? p.x_stride : p.dim;
  // The row count is not known here (the work items index the rows); check the pointers' shape.
  kv_write_detail::check_act("compress_ratio2", p.kv, p.works, stride, p.dim, p.precision);
  kv_write_detail::check_act("compress_ratio2", p.score, p.works, stride, p.dim, p.precision);
  check_paged_table("compress_ratio2", p.table, comp_entry_bytes(p.dim));
  check_common("compress_ratio2", p.norm_weight, p.freqs, p.eps, p.works);
  if (p.works == 0) return;
  DI_CHECK(p.work != nullptr && p.state != nullptr && p.latent != nullptr &&
               reinterpret_cast<uintptr_t>(p.latent) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(p.state) % 16 == 0,
           "compress_ratio2: null work/state or null/unaligned latent/state ({} items)", p.works);
  CompressRatio2Params q = p;
  q.x_stride = stride;
  const auto grid = static_cast<unsigned>(p.works);
  const bool f32 = p.precision == ActPrecision::kF32;
  if (production) {
    if (f32) {
      cuda_detail::launch_pdl(compress_ratio2_kernel<float>, grid, kThreads, 0, stream, q);
    } else {
      cuda_detail::launch_pdl(compress_ratio2_kernel<uint16_t>, grid, kThreads, 0, stream, q);
    }
  } else {
    const size_t smem = static_cast<size_t>(p.dim) * sizeof(float);
    if (f32) {
      cuda_detail::launch_pdl(compress_ratio2_generic_kernel<float>, grid, kThreads, smem, stream,
                              q);
    } else {
      cuda_detail::launch_pdl(compress_ratio2_generic_kernel<uint16_t>, grid, kThreads, smem,
                              stream, q);
    }
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
