// FP8 block-scaled GEMM (kernels/cuda/fp8_gemm) on the V4.1 / V4 weight shapes, against ceilings
// measured in the same run: device-to-device copy bandwidth, cuBLASLt FP8 (per-tensor scales) and
// bf16 GEMM peaks at 8192^3; and cuBLASLt FP8 on the same shapes. Every timing is the median of 5
// replays of a CUDA graph of R launches (no launch gaps), weights rotated over enough copies to
// exceed the L2 cache. Table on stdout, progress on stderr. Never run as a test.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "common/check.h"
#include "kernels/cuda/fp8_gemm/fp8_gemm.h"

namespace di {
namespace {

#define LT_CHECK(expr)                                                        \
  do {                                                                        \
    const cublasStatus_t st_ = (expr);                                        \
    DI_CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt: {} failed ({})", #expr, \
             static_cast<int>(st_));                                          \
  } while (0)

struct Shape {
  const char* name;
  int64_t n, k;
  int block;
};

constexpr Shape kShapes[] = {
    {"v41_wq_a", 1280, 5120, 32},       {"v41_wq_b", 32768, 1280, 32},
    {"v41_wkv", 512, 5120, 32},         {"v41_wo_b", 5120, 8192, 32},
    {"v41_shared_w13", 2304, 5120, 32}, {"v41_shared_w2", 5120, 2304, 32},
    {"v4_wq_a", 1024, 4096, 128},       {"v4_wo_b", 4096, 8192, 128},
};
constexpr int64_t kMs[] = {1, 4, 16, 64, 256, 4096, 8192};

void fill_random(DeviceBuffer& b, uint64_t seed, uint8_t mask_nan_e4m3, cudaStream_t s) {
  std::vector<uint8_t> h(b.size());
  std::mt19937_64 rng(seed);
  for (auto& v : h) {
    v = static_cast<uint8_t>(rng());
    if (mask_nan_e4m3 && (v & 0x7F) == 0x7F) v = 0x3C;
  }
  b.copy_from_host_async(h.data(), h.size(), s);
}

void fill_bf16(DeviceBuffer& b, uint64_t seed, cudaStream_t s) {
  std::vector<uint16_t> h(b.size() / 2);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : h) {
    const float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    v = static_cast<uint16_t>(u >> 16);
  }
  b.copy_from_host_async(h.data(), h.size() * 2, s);
}

using bench::graph_time_us;

// cuBLASLt y^T[n, m] = W[n, k] * x[m, k]^T (TN, column-major views of the row-major tensors),
// FP8 e4m3 with per-tensor scales or bf16, bf16 output, fp32 compute.
class LtGemm {
 public:
  LtGemm(cublasLtHandle_t h, int64_t m, int64_t n, int64_t k, bool fp8, void* workspace,
         size_t ws_bytes)
      : h_(h), workspace_(workspace), ws_bytes_(ws_bytes) {
    const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    LT_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LT_CHECK(cublasLtMatrixLayoutCreate(&a_, in, k, n, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b_, in, k, m, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&d_, CUDA_R_16BF, n, m, n));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws_bytes_, sizeof(ws_bytes_)));
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h_, desc_, a_, b_, d_, d_, pref, 1, &heur_, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    DI_CHECK(found > 0, "cuBLASLt: no algorithm for m={} n={} k={}", m, n, k);
  }
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(d_);
    cublasLtMatmulDescDestroy(desc_);
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void set_scales(const float* a_scale, const float* b_scale) {
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                            sizeof(a_scale)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                            sizeof(b_scale)));
  }
  void run(const void* w, const void* x, void* y, cudaStream_t s) {
    const float alpha = 1.0f, beta = 0.0f;
    LT_CHECK(cublasLtMatmul(h_, desc_, &alpha, w, a_, x, b_, &beta, y, d_, y, d_, &heur_.algo,
                            workspace_, ws_bytes_, s));
  }

 private:
  cublasLtHandle_t h_;
  void* workspace_;
  size_t ws_bytes_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t heur_{};
};

double lt_peak_tflops(cublasLtHandle_t h, Stream& stream, bool fp8, DeviceBuffer& ws,
                      const float* one) {
  const int64_t s = 8192;
  const size_t elt = fp8 ? 1 : 2;
  DeviceBuffer a(static_cast<size_t>(s * s) * elt, "peak a"), b(a.size(), "peak b");
  DeviceBuffer d(static_cast<size_t>(s * s) * 2, "peak d");
  if (fp8) {
    fill_random(a, 1, 1, stream.get());
    fill_random(b, 2, 1, stream.get());
  } else {
    fill_bf16(a, 1, stream.get());
    fill_bf16(b, 2, stream.get());
  }
  LtGemm g(h, s, s, s, fp8, ws.data(), ws.size());
  if (fp8) g.set_scales(one, one);
  const double us = graph_time_us(
      stream, 10, [&](int, cudaStream_t st) { g.run(a.data(), b.data(), d.data(), st); });
  return 2.0 * s * s * s / (us * 1e-6) / 1e12;
}

// `fp8_gemm_bench [shape [m]]`: only the shapes whose name contains `shape`, only batch m.
int run_bench(const std::string& shape_filter, int64_t m_filter) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const DeviceInfo info = device_info(0);
  Stream stream;
  std::fprintf(stderr, "device: %s, %d SMs\n", info.name.c_str(), info.sm_count);

  // Copy bandwidth: 2 GiB device-to-device (smaller buffers under-report), bytes read + written.
  const size_t copy_bytes = size_t{2} << 30;
  DeviceBuffer c0(copy_bytes, "copy src"), c1(copy_bytes, "copy dst");
  c0.fill_async(0x5A, stream.get());
  // Timed on the stream, not inside a graph: a graph's memcpy node may run on a copy engine
  // (~1.4 TB/s), while a stream device-to-device copy runs as a kernel on the SMs.
  double copy_us = 0.0;
  {
    std::vector<double> t;
    Event start(true), end(true);
    for (int trial = 0; trial < 7; ++trial) {
      start.record(stream.get());
      DI_CUDA_CHECK(cudaMemcpyAsync(c1.data(), c0.data(), copy_bytes, cudaMemcpyDeviceToDevice,
                                    stream.get()));
      end.record(stream.get());
      end.synchronize();
      if (trial >= 2) t.push_back(1000.0 * Event::elapsed_ms(start, end));
    }
    std::sort(t.begin(), t.end());
    copy_us = t[t.size() / 2];
  }
  const double copy_gbs = 2.0 * copy_bytes / (copy_us * 1e-6) / 1e9;

  cublasLtHandle_t lt;
  LT_CHECK(cublasLtCreate(&lt));
  DeviceBuffer lt_ws(size_t{64} << 20, "cublasLt workspace");
  DeviceBuffer one(4, "scale one");
  const float one_h = 1.0f;
  one.copy_from_host_async(&one_h, 4, stream.get());
  const double fp8_peak = lt_peak_tflops(lt, stream, true, lt_ws, one.as<float>());
  const double bf16_peak = lt_peak_tflops(lt, stream, false, lt_ws, one.as<float>());
  std::printf(
      "# ceilings (%s, %d SMs): copy %.0f GB/s (read+write), cuBLASLt FP8 8192^3 %.0f "
      "TFLOP/s, cuBLASLt bf16 8192^3 %.0f TFLOP/s\n",
      info.name.c_str(), info.sm_count, copy_gbs, fp8_peak, bf16_peak);
  std::printf(
      "| shape | N x K | blk | M | tile | act_quant+GEMM us | GEMM us | act_quant us | TFLOP/s | "
      "%%FP8 peak | W GB/s | %%copy | %%copy w/ act_quant | cuBLASLt FP8 us | cuBLASLt/GEMM "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);

  for (const Shape& sh : kShapes) {
    if (std::string(sh.name).find(shape_filter) == std::string::npos) continue;
    const size_t wbytes = static_cast<size_t>(sh.n * sh.k);
    const int copies =
        static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / wbytes + 1, 1, 48));
    std::vector<DeviceBuffer> w;
    std::vector<DeviceBuffer> ws;
    for (int i = 0; i < copies; ++i) {
      w.emplace_back(wbytes, "bench weight");
      // Random codes once, then device copies: distinct buffers (no L2 reuse), less host time.
      if (i == 0) {
        fill_random(w.back(), 10, 1, stream.get());
      } else {
        DI_CUDA_CHECK(cudaMemcpyAsync(w.back().data(), w[0].data(), wbytes,
                                      cudaMemcpyDeviceToDevice, stream.get()));
      }
    }
    DeviceBuffer wscale(static_cast<size_t>(((sh.n + sh.block - 1) / sh.block) *
                                            ((sh.k + sh.block - 1) / sh.block)),
                        "bench weight scale");
    wscale.fill_async(120, stream.get());
    for (const int64_t m : kMs) {
      if (m_filter > 0 && m != m_filter) continue;
      DeviceBuffer x(static_cast<size_t>(m * sh.k) * 2, "bench x");
      fill_bf16(x, 7, stream.get());
      DeviceBuffer xq(static_cast<size_t>(m * sh.k), "bench x fp8");
      fill_random(xq, 8, 1, stream.get());
      DeviceBuffer y(static_cast<size_t>(m * sh.n) * 2, "bench y");
      const size_t ws_bytes = fp8_gemm_workspace_bytes(m, sh.k, sh.block);
      DeviceBuffer work(ws_bytes, "bench workspace");
      const Fp8GemmPlan plan =
          plan_fp8_gemm(m, sh.n, sh.k, sh.block, info.sm_count, info.sm_major, info.sm_minor);
      const double flops = 2.0 * static_cast<double>(m * sh.n) * static_cast<double>(sh.k);
      const int reps = static_cast<int>(std::clamp<double>(2e12 / std::max(flops, 1.0), 20, 200));
      // Replay i streams weight copy i % copies (no L2 reuse between replays).
      const auto params_for = [&](int i) {
        Fp8GemmParams p;
        p.weight = w[static_cast<size_t>(i % copies)].as<uint8_t>();
        p.weight_scale = wscale.as<uint8_t>();
        p.m = m;
        p.n = sh.n;
        p.k = sh.k;
        p.block = sh.block;
        p.out = y.data();
        return p;
      };
      const double ours = graph_time_us(stream, reps, [&](int i, cudaStream_t s) {
        Fp8GemmParams p = params_for(i);
        p.x = x.data();
        p.workspace = work.data();
        p.workspace_bytes = ws_bytes;
        fp8_gemm(p, plan, s);
      });
      // The producer-quantised form (fused RMSNorm + act_quant upstream): the GEMM alone.
      const int64_t nkb = (sh.k + sh.block - 1) / sh.block;
      DeviceBuffer qx(static_cast<size_t>(m * sh.k), "bench quantised x");
      DeviceBuffer qs(static_cast<size_t>(m * nkb), "bench x scales");
      const Fp8ActQuantParams aq{x.data(),         Fp8ActDtype::kBf16, m, sh.k, sh.block,
                                 qx.as<uint8_t>(), qs.as<uint8_t>()};
      fp8_act_quant(aq, stream.get());
      const double quant =
          graph_time_us(stream, reps, [&](int, cudaStream_t s) { fp8_act_quant(aq, s); });
      const double gemm = graph_time_us(stream, reps, [&](int i, cudaStream_t s) {
        Fp8GemmParams p = params_for(i);
        p.xq = qx.as<uint8_t>();
        p.xq_scale = qs.as<uint8_t>();
        fp8_gemm(p, plan, s);
      });
      LtGemm g(lt, m, sh.n, sh.k, true, lt_ws.data(), lt_ws.size());
      g.set_scales(one.as<float>(), one.as<float>());
      const double cub = graph_time_us(stream, reps, [&](int i, cudaStream_t s) {
        g.run(w[static_cast<size_t>(i % copies)].data(), xq.data(), y.data(), s);
      });
      const double tflops = flops / (gemm * 1e-6) / 1e12;
      const double wgbs = static_cast<double>(wbytes) / (gemm * 1e-6) / 1e9;
      const double wgbs_all = static_cast<double>(wbytes) / (ours * 1e-6) / 1e9;
      std::printf(
          "| %s | %lldx%lld | %d | %lld | %s%dx%d/%dk | %.2f | %.2f | %.2f | %.1f | %.1f%% | %.0f "
          "| %.1f%% | %.1f%% | %.2f | %.2f |\n",
          sh.name, static_cast<long long>(sh.n), static_cast<long long>(sh.k), sh.block,
          static_cast<long long>(m), plan.swapped ? "swap " : (plan.persistent ? "pers " : ""),
          plan.block_m, plan.block_n, plan.num_chunks, ours, gemm, quant, tflops,
          100.0 * tflops / fp8_peak, wgbs, 100.0 * wgbs / copy_gbs, 100.0 * wgbs_all / copy_gbs,
          cub, cub / gemm);
      std::fflush(stdout);
    }
  }
  cublasLtDestroy(lt);
  return 0;
}

}  // namespace
}  // namespace di

int main(int argc, char** argv) {
  try {
    return di::run_bench(argc > 1 ? argv[1] : "", argc > 2 ? std::stoll(argv[2]) : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8_gemm_bench: %s\n", e.what());
    return 1;
  }
}
