// RMSNorm and RMSNorm + act_quant (kernels/params/dense_ops.h): one CTA per row, the row in
// registers, fixed reduction order (row_norm_quant.cuh). Memory-bound: one read of x, one write
// of y and/or of the e4m3 codes and scales.

#include "kernels/cuda/ops/rmsnorm.cuh"
#include "kernels/cuda/ops/row_launch.cuh"

namespace di {

using ops_detail::aligned_to;

namespace {

ops_detail::RowKernelArgs norm_args(const RmsNormParams& p) {
  ops_detail::RowKernelArgs a{};
  a.x = p.x;
  a.weight = p.weight;
  a.y = p.y;
  a.dim = p.dim;
  a.x_stride = p.x_stride != 0 ? p.x_stride : p.dim;
  a.y_stride = p.y_stride != 0 ? p.y_stride : p.dim;
  a.eps = p.eps;
  return a;
}

void check_norm(const char* op, const RmsNormParams& p, bool need_y) {
  const ops_detail::RowKernelArgs a = norm_args(p);
  ops_detail::check_rows(op, p.rows, p.dim, a.x_stride, p.x, p.precision);
  DI_CHECK(a.y_stride >= p.dim && a.y_stride % 4 == 0,
           "{}: y row stride {} must be >= dim {} and a multiple of 4", op, a.y_stride, p.dim);
  const uintptr_t vec = p.precision == ActPrecision::kF32 ? 16 : 8;
  DI_CHECK(!need_y || p.rows == 0 || (p.y != nullptr && aligned_to(p.y, vec)),
           "{}: y must be non-null and {}-byte aligned", op, vec);
  DI_CHECK(p.y == nullptr || aligned_to(p.y, vec), "{}: y must be {}-byte aligned", op, vec);
  DI_CHECK(p.weight == nullptr || aligned_to(p.weight, 16), "{}: weight must be 16-byte aligned",
           op);
  DI_CHECK(p.eps >= 0.0f, "{}: eps must be >= 0, got {}", op, p.eps);
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  check_norm("rms_norm", p, /*need_y=*/true);
  if (p.rows == 0) return;
  ops_detail::launch_row_kernel<true, false>(norm_args(p), p.rows, p.precision, stream);
}

void rms_norm_act_quant(const RmsNormQuantParams& p, cudaStream_t stream) {
  check_norm("rms_norm_act_quant", p.norm, /*need_y=*/false);
  ops_detail::check_quant("rms_norm_act_quant", p.norm.rows, p.norm.dim, p.block, p.codes,
                          p.scales);
  if (p.norm.rows == 0) return;
  ops_detail::RowKernelArgs a = norm_args(p.norm);
  a.codes = p.codes;
  a.scales = p.scales;
  a.block = p.block;
  DI_CHECK(p.codes_interleaved == nullptr ||
               (p.block == 32 && ops_detail::aligned_to(p.codes_interleaved, 4)),
           "rms_norm_act_quant: interleaved codes need block 32 (got {}) and 4-byte alignment",
           p.block);
  a.codes_interleaved = p.codes_interleaved;
  ops_detail::launch_row_kernel<true, true>(a, p.norm.rows, p.norm.precision, stream);
}

}  // namespace di
