// Host side of the FP8 block-scaled GEMM: the plan (tile choice per shape), the workspace layout,
// the bulk-copy tensor maps and the one dispatch point (architecture, then block size).

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm_sm90_launch.h"
#include "kernels/cuda/sm90_limits.h"

namespace di {
namespace {

constexpr int64_t kDecodeMaxM = 256;  // up to here: block_m 64, block_n chosen to fill the SMs
constexpr auto kMaxSmem = static_cast<size_t>(cuda_detail::kSm90MaxSmemPerBlock);

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

size_t q_bytes(int64_t m, int64_t k) {
  return static_cast<size_t>(round_up(m * k, 256));
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, looked up once through the runtime (the project links the
// static runtime, not libcuda). Encoding is host-only work: no device call, no allocation.
EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult query{};
    DI_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                   cudaEnableDefault, &query));
    DI_CHECK(query == cudaDriverEntryPointSuccess && p != nullptr,
             "fp8_gemm: cuTensorMapEncodeTiled not found in the driver");
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

CUtensorMap make_map_2d(const void* base, CUtensorMapDataType dtype, int64_t inner, int64_t outer,
                        int64_t row_stride_bytes, int box_inner, int box_outer,
                        CUtensorMapSwizzle swizzle, const char* what) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_inner),
                             static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      encode_tiled()(&map, dtype, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DI_CHECK(r == CUDA_SUCCESS, "fp8_gemm: encoding the {} tensor map [{}, {}] failed (CUresult {})",
           what, outer, inner, static_cast<int>(r));
  return map;
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

size_t fp8_gemm_workspace_bytes(int64_t m, int64_t k, int block) {
  return q_bytes(m, k) + static_cast<size_t>(m * ceil_div(k, block));
}

Fp8GemmPlan plan_fp8_gemm(int64_t m, int64_t n, int64_t k, int block, int sm_count, int sm_major,
                          int sm_minor) {
  DI_CHECK(sm_major == 9 && sm_minor == 0,
           "fp8_gemm: no kernel for sm_{}{} (built for sm_90a only)", sm_major, sm_minor);
  DI_CHECK(block == 32 || block == 128, "fp8_gemm: block must be 32 or 128, got {}", block);
  DI_CHECK(m > 0 && n > 0 && k > 0 && k % 16 == 0 && m < (int64_t{1} << 31) &&
               n < (int64_t{1} << 31) && k < (int64_t{1} << 20),
           "fp8_gemm: bad shape m={} n={} k={} (k must be a multiple of 16)", m, n, k);
  Fp8GemmPlan p;
  p.arch = Fp8GemmArch::kSm90;
  p.m = m;
  p.n = n;
  p.k = k;
  p.block = block;
  // Fixed split-K (a function of n, k and the SM count, never of m): enough chunks that the
  // 64-row weight slabs of the swapped decode kernel give about three CTAs per multiprocessor,
  // at most 8 (a portable cluster) and at least 2 stages (256 columns) each.
  const int64_t k_stages = ceil_div(k, 128);
  const int64_t slabs = ceil_div(n, 64);
  const int64_t want = std::clamp<int64_t>((3 * sm_count + slabs / 2) / slabs, 1, 8);
  const int64_t chunks_target = std::max<int64_t>(1, std::min(want, k_stages / 2));
  p.chunk_stages = static_cast<int>(ceil_div(k_stages, chunks_target));
  p.num_chunks = static_cast<int>(ceil_div(k_stages, p.chunk_stages));
  const int num_kb = static_cast<int>(ceil_div(k, block));
  if (m <= fp8_sm90::kSwapMaxM) {
    // Weight streaming, swapped: 64 or 128 weight rows per CTA (two consumer warpgroups sharing
    // the token tile when that still gives every multiprocessor a CTA), tokens padded to
    // 8/16/32/64.
    p.swapped = true;
    p.block_m = m <= 8 ? 8 : (m <= 16 ? 16 : (m <= 32 ? 32 : 64));
    p.swap_wgs = ceil_div(n, 128) * p.num_chunks >= sm_count ? 2 : 1;
    p.block_n = 64 * p.swap_wgs;
    p.stages = fp8_sm90::swap_stages(p.block_m, p.swap_wgs);
    p.a_box_rows = p.block_m;
    p.smem_bytes = fp8_sm90::sm90_swap_smem_bytes(p.block_m, p.swap_wgs, block);
  } else if (m <= kDecodeMaxM) {
    // Weight streaming: the widest tile that still gives every multiprocessor a CTA.
    p.block_m = 64;
    p.stages = fp8_sm90::kDecodeStages;
    const int64_t m_tiles = ceil_div(m, 64);
    p.block_n = 16;
    for (int bn : {128, 64, 32}) {
      if (ceil_div(n, bn) * m_tiles * p.num_chunks >= sm_count) {
        p.block_n = bn;
        break;
      }
    }
    p.a_box_rows = 64;
    p.smem_bytes = fp8_sm90::sm90_smem_bytes(p.block_m, p.block_n, block, p.stages, num_kb);
  } else {
    p.block_m = 128;
    p.block_n = 128;
    p.a_box_rows = 128;
    p.persistent = true;
    const bool smem_tot = fp8_sm90::prefill_tot_in_smem(block, p.num_chunks);
    p.stages = smem_tot ? fp8_sm90::kPrefillFoldStages : fp8_sm90::kPrefillStages;
    p.smem_bytes = fp8_sm90::sm90_prefill_smem_bytes(p.stages, smem_tot);
  }
  DI_CHECK(p.smem_bytes <= kMaxSmem, "fp8_gemm: k={} needs {} bytes of shared memory", k,
           p.smem_bytes);
  p.grid_m = static_cast<unsigned>(ceil_div(m, p.block_m));
  p.grid_n = static_cast<unsigned>(ceil_div(n, p.block_n));
  DI_CHECK(p.grid_m <= 65535, "fp8_gemm: m={} too large", m);
  const int64_t tiles = static_cast<int64_t>(p.grid_m) * p.grid_n;
  p.ctas =
      static_cast<unsigned>(p.persistent ? std::min<int64_t>(tiles, std::max(sm_count, 1)) : tiles);
  return p;
}

void fp8_gemm(const Fp8GemmParams& p, const Fp8GemmPlan& plan, cudaStream_t stream) {
  DI_CHECK(p.m == plan.m && p.n == plan.n && p.k == plan.k && p.block == plan.block,
           "fp8_gemm: params [{}, {}, {}] / block {} do not match the plan [{}, {}, {}] / {}", p.m,
           p.n, p.k, p.block, plan.m, plan.n, plan.k, plan.block);
  DI_CHECK(p.weight != nullptr && p.weight_scale != nullptr && p.out != nullptr,
           "fp8_gemm: null weight/weight_scale/out pointer");
  DI_CHECK(aligned(p.weight, 16) && aligned(p.out, 8),
           "fp8_gemm: weight needs 16-byte, out 8-byte alignment");
  const uint8_t* q = p.xq;
  const uint8_t* sa = p.xq_scale;
  if (q == nullptr) {
    // 1. act_quant into the workspace: e4m3 codes, then the ue8m0 scales [m, num_kb].
    DI_CHECK(p.x != nullptr && p.workspace != nullptr,
             "fp8_gemm: needs x and a workspace, or quantised xq + xq_scale");
    DI_CHECK(p.workspace_bytes >= fp8_gemm_workspace_bytes(p.m, p.k, p.block),
             "fp8_gemm: workspace of {} bytes, {} needed", p.workspace_bytes,
             fp8_gemm_workspace_bytes(p.m, p.k, p.block));
    DI_CHECK(aligned(p.workspace, 256), "fp8_gemm: workspace needs 256-byte alignment");
    auto* wq = static_cast<uint8_t*>(p.workspace);
    auto* wsa = wq + q_bytes(p.m, p.k);
    fp8_act_quant({p.x, p.x_dtype, p.m, p.k, p.block, wq, wsa}, stream);
    q = wq;
    sa = wsa;
  } else {
    DI_CHECK(sa != nullptr && aligned(q, 16), "fp8_gemm: xq needs xq_scale and 16-byte alignment");
  }

  // 2. The tensor-core GEMM.
  const int64_t num_kb = ceil_div(p.k, p.block);
  fp8_sm90::Sm90Launch l{};
  l.map_a = make_map_2d(q, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.k, p.m, p.k, 128, plan.a_box_rows,
                        CU_TENSOR_MAP_SWIZZLE_128B, "activation");
  l.map_b = make_map_2d(p.weight, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.k, p.n, p.k, 128, plan.block_n,
                        CU_TENSOR_MAP_SWIZZLE_128B, "weight");
  l.args.act_scale = sa;
  l.args.weight_scale = p.weight_scale;
  l.args.out = p.out;
  l.args.m = static_cast<int>(p.m);
  l.args.n = static_cast<int>(p.n);
  l.args.num_kb = static_cast<int>(num_kb);
  l.args.num_k_stages = static_cast<int>(ceil_div(p.k, 128));
  l.args.scale_rows = static_cast<int>(ceil_div(p.n, p.block));
  l.args.a_stage_bytes = static_cast<uint32_t>(plan.a_box_rows) * 128u;
  l.args.chunk_stages = plan.chunk_stages;

  switch (plan.arch) {
    case Fp8GemmArch::kSm90:
      if (p.block == 32) {
        fp8_sm90::launch_sm90<32>(plan, l, p.out_dtype, stream);
      } else {
        fp8_sm90::launch_sm90<128>(plan, l, p.out_dtype, stream);
      }
      break;
  }
}

}  // namespace di
