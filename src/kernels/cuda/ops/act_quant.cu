// Standalone act_quant (kernels/params/dense_ops.h): the quantization half of the row kernel
// (row_norm_quant.cuh) without the norm. One read of x, one write of codes and scales.

#include "kernels/cuda/ops/act_quant.cuh"
#include "kernels/cuda/ops/row_launch.cuh"

namespace di {

void act_quant(const ActQuantParams& p, cudaStream_t stream) {
  const int64_t x_stride = p.x_stride != 0 ? p.x_stride : p.dim;
  ops_detail::check_rows("act_quant", p.rows, p.dim, x_stride, p.x, p.precision);
  ops_detail::check_quant("act_quant", p.rows, p.dim, p.block, p.codes, p.scales);
  if (p.rows == 0) return;
  ops_detail::RowKernelArgs a{};
  a.x = p.x;
  a.dim = p.dim;
  a.x_stride = x_stride;
  a.codes = p.codes;
  a.scales = p.scales;
  a.block = p.block;
  ops_detail::launch_row_kernel<false, true>(a, p.rows, p.precision, stream);
}

}  // namespace di
