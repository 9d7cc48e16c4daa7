// Window KV write (kernels/params/kv_write.h SwaWriteParams), one CTA of 128 threads per row:
// load the wkv row into shared memory (fp32), kv_norm (sequential sum of squares, the CPU's order),
// RoPE on the last 64 values at the row's position, act_quant e4m3 / UE8M0-32, 528-byte entry into
// the sequence's ring slot of this layer's block. Memory-trivial (1 KiB in, 528 B out per row); the
// single-thread reduction is the price of bitwise CPU parity (~1 us of latency per CTA).
// Other widths (SwaWriteParams::dim / rope_dim): swa_write_generic_kernel, the same steps on a row
// in dynamic shared memory (kv_write.cuh *_generic helpers).
// Also: the activation and width checks shared with the other launchers (tables:
// kernels/cuda/paged_table_check.h).

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/kv_write/kv_write.cuh"
#include "kernels/cuda/paged_table_check.h"
#include "kernels/cuda/pdl.cuh"

namespace di {

namespace kv_write_detail {

void check_act(const char* op, const void* x, int64_t rows, int64_t stride, int32_t dim,
               ActPrecision p) {
  DI_CHECK(rows >= 0 && rows <= INT32_MAX, "{}: rows must be in [0, 2^31), got {}", op, rows);
  DI_CHECK(stride >= dim && stride % 4 == 0, "{}: row stride {} must be >= {} and a multiple of 4",
           op, stride, dim);
  const uintptr_t vec = p == ActPrecision::kF32 ? 16 : 8;
  DI_CHECK(rows == 0 || (x != nullptr && reinterpret_cast<uintptr_t>(x) % vec == 0),
           "{}: input must be non-null and {}-byte aligned", op, vec);
}

bool check_width(const char* op, int32_t dim, int32_t rope_dim, int32_t production_dim) {
  DI_CHECK(dim > 0 && dim % 32 == 0 && dim <= kKvGenericMaxFloats,
           "{}: dim {} must be a positive multiple of 32, at most {}", op, dim,
           kKvGenericMaxFloats);
  DI_CHECK(rope_dim >= 2 && rope_dim % 2 == 0 && rope_dim <= dim,
           "{}: rope_dim {} must be even and in [2, dim = {}]", op, rope_dim, dim);
  return dim == production_dim && rope_dim == kKvRopeDim;
}

}  // namespace kv_write_detail

namespace {

using kv_write_detail::kThreads;

template <typename T>
__global__ void __launch_bounds__(kThreads) swa_write_kernel(SwaWriteParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  __shared__ __align__(16) float row[kKvDim];
  __shared__ float scale;
  const int64_t r = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t pos = p.positions[r];
  const int32_t seq = p.seq[r];
  const bool to_ring = p.write_ring && (p.seq_end == nullptr || pos >= p.seq_end[seq] - p.window);
  if (!to_ring && p.chunk_entries == nullptr) return;  // uniform over the CTA

  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  *reinterpret_cast<float4*>(row + 4 * tid) = kv_write_detail::load_row4(x, tid);
  __syncthreads();
  kv_write_detail::rms_norm_row512(row, p.norm_weight, p.eps, &scale);
  kv_write_detail::rope_row512(row, pos, p.freqs);
  if (to_ring) {
    const int64_t e = static_cast<int64_t>(p.ring_block) * p.window + pos % p.window;
    kv_write_detail::store_swa_entry(row, paged_entry(p.table, seq, e));
  }
  if (p.chunk_entries != nullptr) {
    kv_write_detail::store_swa_entry(row, p.chunk_entries + r * kSwaEntryBytes);
  }
}

// Any supported width: the same steps, a row of p.dim floats in dynamic shared memory.
template <typename T>
__global__ void __launch_bounds__(kThreads) swa_write_generic_kernel(SwaWriteParams p) {
  cuda_detail::pdl_wait();
  cuda_detail::pdl_launch_dependents();
  extern __shared__ __align__(16) float row_dyn[];  // [dim]
  __shared__ float scale;
  const int64_t r = blockIdx.x;
  const int64_t pos = p.positions[r];
  const int32_t seq = p.seq[r];
  const bool to_ring = p.write_ring && (p.seq_end == nullptr || pos >= p.seq_end[seq] - p.window);
  if (!to_ring && p.chunk_entries == nullptr) return;  // uniform over the CTA

  kv_write_detail::load_row_generic(static_cast<const T*>(p.x) + r * p.x_stride, row_dyn, p.dim);
  kv_write_detail::rms_norm_row_generic(row_dyn, p.norm_weight, p.dim, p.eps, &scale);
  kv_write_detail::rope_row_generic(row_dyn, p.dim, p.rope_dim, pos, p.freqs);
  if (to_ring) {
    const int64_t e = static_cast<int64_t>(p.ring_block) * p.window + pos % p.window;
    kv_write_detail::store_swa_entry_generic(row_dyn, p.dim, paged_entry(p.table, seq, e));
  }
  if (p.chunk_entries != nullptr) {
    kv_write_detail::store_swa_entry_generic(row_dyn, p.dim,
                                             p.chunk_entries + r * swa_entry_bytes(p.dim));
  }
}

}  // namespace

void swa_write(const SwaWriteParams& p, cudaStream_t stream) {
  const bool production = kv_write_detail::check_width("swa_write", p.dim, p.rope_dim, kKvDim);
  const int64_t stride = p.x_stride != 0 ? p.x_stride : p.dim;
  kv_write_detail::check_act("swa_write", p.x, p.rows, stride, p.dim, p.precision);
  if (p.write_ring) check_paged_table("swa_write", p.table, swa_entry_bytes(p.dim));
  DI_CHECK(p.write_ring || p.chunk_entries != nullptr || p.rows == 0,
           "swa_write: nothing to write (write_ring false and no chunk_entries)");
  DI_CHECK(p.window > 0 && p.ring_block >= 0, "swa_write: window {} / ring_block {}", p.window,
           p.ring_block);
  DI_CHECK(p.eps >= 0.0f, "swa_write: eps must be >= 0, got {}", p.eps);
  if (p.rows == 0) return;
  DI_CHECK(
      p.norm_weight != nullptr && p.freqs != nullptr && p.seq != nullptr && p.positions != nullptr,
      "swa_write: null norm_weight/freqs/seq/positions ({} rows)", p.rows);
  DI_CHECK(reinterpret_cast<uintptr_t>(p.norm_weight) % 16 == 0,
           "swa_write: norm_weight must be 16-byte aligned");
  DI_CHECK(reinterpret_cast<uintptr_t>(p.chunk_entries) % 16 == 0,
           "swa_write: chunk_entries must be 16-byte aligned");
  SwaWriteParams q = p;
  q.x_stride = stride;
  const auto grid = static_cast<unsigned>(p.rows);
  const bool f32 = p.precision == ActPrecision::kF32;
  if (production) {
    if (f32) {
      cuda_detail::launch_pdl(swa_write_kernel<float>, grid, kThreads, 0, stream, q);
    } else {
      cuda_detail::launch_pdl(swa_write_kernel<uint16_t>, grid, kThreads, 0, stream, q);
    }
  } else {
    const size_t smem = static_cast<size_t>(p.dim) * sizeof(float);
    if (f32) {
      cuda_detail::launch_pdl(swa_write_generic_kernel<float>, grid, kThreads, smem, stream, q);
    } else {
      cuda_detail::launch_pdl(swa_write_generic_kernel<uint16_t>, grid, kThreads, smem, stream, q);
    }
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace di
