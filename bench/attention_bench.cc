// CSA2 sparse attention (issue 7) at decode: window 128 FP8 entries + 512 selected FP4 compressed
// entries per query row, 64 heads x 512, for batches of 1..1024 sequences at a 64K context (32K
// compressed entries per sequence, ratio 2). Reports the time, the bytes the op must move (KV
// entries read, q read, output written) against the device-to-device copy bandwidth, and the
// tensor FLOPs (QK and PV, 2 * 64 * entries * 512 each) against cuBLAS's bf16 GEMM rate at
// 8192^3, both measured in the same run. Table on stdout. Never run as a test.
//
// `attention_bench [batch [fp32|bf16|bf16-mma]]`: bf16 runs the wgmma kernel (the forward's
// choice), bf16-mma the mma.sync kernel at bf16 precision (SparseAttnParams::tensor_kernel), fp32
// the mma.sync kernel at fp32. Times: median per launch of a CUDA graph of 20 launches.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "common/error.h"
#include "kernels/cpu/kv_pack.h"
#include "kernels/cuda/attention/sparse_attention.cuh"

namespace {

using di::DeviceBuffer;

// Fills a device buffer with copies of a host pattern of whole entries (valid codes and scales).
void fill_entries(DeviceBuffer& b, const std::vector<uint8_t>& pattern, cudaStream_t s) {
  const size_t n = std::min(pattern.size(), b.size());
  b.copy_from_host_async(pattern.data(), n, s);
  for (size_t off = n; off < b.size(); off += n) {
    const size_t len = std::min(n, b.size() - off);
    DI_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(b.data()) + off, b.data(), len,
                                  cudaMemcpyDeviceToDevice, s));
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(s));
}

std::vector<uint8_t> entry_pattern(int entry_bytes, int entries, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint8_t> out(static_cast<size_t>(entry_bytes) * entries);
  std::vector<float> v(di::kKvDim);
  for (int e = 0; e < entries; ++e) {
    for (auto& x : v)
      x = d(rng);
    std::span<uint8_t> dst(out.data() + static_cast<size_t>(e) * entry_bytes, entry_bytes);
    if (entry_bytes == di::kSwaEntryBytes) {
      di::cpu::pack_swa_entry(v, dst);
    } else {
      di::cpu::pack_comp_entry(v, dst);
    }
  }
  return out;
}

double bf16_peak_tflops(cudaStream_t s) {  // best of 10 cuBLAS bf16 GEMMs 8192^3
  const int n = 8192;
  DeviceBuffer a(size_t{2} * n * n, "peak a"), b(a.size(), "peak b"), c(a.size(), "peak c");
  a.fill_async(0x3C, s);  // bf16 0x3C3C ~ 0.0115: finite, non-zero
  b.fill_async(0x3C, s);
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw di::Error("cublasCreate failed");
  cublasSetStream(h, s);
  const float one = 1.0f, zero = 0.0f;
  auto run = [&] {
    if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.data(), CUDA_R_16BF, n, b.data(),
                     CUDA_R_16BF, n, &zero, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      throw di::Error("cublasGemmEx failed");
  };
  run();
  di::Event start(true), stop(true);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    start.record(s);
    run();
    stop.record(s);
    stop.synchronize();
    best = std::min(best, 1e3 * static_cast<double>(di::Event::elapsed_ms(start, stop)));
  }
  cublasDestroy(h);
  return 2.0 * n * n * static_cast<double>(n) / (best * 1e-6) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int64_t batch_only = argc > 1 ? std::stoll(argv[1]) : 0;
    const std::string prec_only = argc > 2 ? argv[2] : "";
    if (di::cuda_device_count() == 0) {
      std::fprintf(stderr, "attention_bench: no CUDA device\n");
      return 77;
    }
    const di::DeviceInfo info = di::device_info(0);
    std::printf("device: %s (sm_%d%d, %d SMs)\n", info.name.c_str(), info.sm_major, info.sm_minor,
                info.sm_count);
    di::Stream stream;
    const cudaStream_t s = stream.get();
    const double copy_gbs = di::bench::copy_gbs(stream);
    const double peak = bf16_peak_tflops(s);
    std::printf(
        "ceilings: D2D copy %.1f GB/s (read + write of 2 GiB, median of 5); cuBLAS bf16 "
        "8192^3 %.1f TFLOP/s (best of 10)\n",
        copy_gbs, peak);

    constexpr int kComp = 32768;  // 64K context, ratio 2
    constexpr int kTopk = 512;
    constexpr int kWin = 128;
    const int64_t max_batch = 1024;  // 1,024 rows: many waves, the steady state of a prefill chunk
    // Pages of 64 entries, identity page tables (sequence b owns pages [b * n, (b + 1) * n)).
    const int64_t comp_page = 64LL * di::kCompEntryBytes, swa_page = 64LL * di::kSwaEntryBytes;
    const int comp_pages = kComp / 64, swa_pages = kWin / 64;
    DeviceBuffer comp(static_cast<size_t>(max_batch * comp_pages * comp_page), "comp pool");
    DeviceBuffer swa(static_cast<size_t>(max_batch * swa_pages * swa_page), "swa pool");
    fill_entries(comp, entry_pattern(di::kCompEntryBytes, 4096, 1), s);
    fill_entries(swa, entry_pattern(di::kSwaEntryBytes, 2048, 2), s);
    std::vector<int32_t> cp(static_cast<size_t>(max_batch * comp_pages)),
        sp(static_cast<size_t>(max_batch * swa_pages));
    std::iota(cp.begin(), cp.end(), 0);
    std::iota(sp.begin(), sp.end(), 0);
    DeviceBuffer d_cp(cp.size() * 4, "comp pages"), d_sp(sp.size() * 4, "swa pages");
    d_cp.copy_from_host_async(cp.data(), cp.size() * 4, s);
    d_sp.copy_from_host_async(sp.data(), sp.size() * 4, s);
    std::mt19937_64 rng(3);
    std::vector<int32_t> topk(static_cast<size_t>(max_batch * kTopk));
    std::vector<int32_t> all(kComp);
    std::iota(all.begin(), all.end(), 0);
    for (int64_t r = 0; r < max_batch; ++r) {
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + kTopk);
      std::copy_n(all.begin(), kTopk, topk.begin() + r * kTopk);
    }
    std::vector<int32_t> seq(static_cast<size_t>(max_batch));
    std::iota(seq.begin(), seq.end(), 0);
    std::vector<int64_t> pos(static_cast<size_t>(max_batch), 65535),
        cs(static_cast<size_t>(max_batch), 65536), r0(static_cast<size_t>(max_batch), 0);
    DeviceBuffer d_topk(topk.size() * 4, "topk"), d_seq(seq.size() * 4, "seq"),
        d_pos(pos.size() * 8, "pos"), d_cs(cs.size() * 8, "cs"), d_r0(r0.size() * 8, "r0");
    d_topk.copy_from_host_async(topk.data(), topk.size() * 4, s);
    d_seq.copy_from_host_async(seq.data(), seq.size() * 4, s);
    d_pos.copy_from_host_async(pos.data(), pos.size() * 8, s);
    d_cs.copy_from_host_async(cs.data(), cs.size() * 8, s);
    d_r0.copy_from_host_async(r0.data(), r0.size() * 8, s);
    std::vector<float> sink(64, 0.5f), freqs(32, 1e-3f);
    DeviceBuffer d_sink(256, "sink"), d_freqs(128, "freqs");
    d_sink.copy_from_host_async(sink.data(), 256, s);
    d_freqs.copy_from_host_async(freqs.data(), 128, s);
    DeviceBuffer q(static_cast<size_t>(max_batch) * 64 * 512 * 4, "q");
    q.fill_async(0x3D, s);  // fp32 0x3D3D3D3D ~ 0.046 / bf16 0x3D3D ~ 0.046
    DeviceBuffer out(q.size(), "out");
    DI_CUDA_CHECK(cudaStreamSynchronize(s));

    std::printf(
        "\n| batch | precision | us | must-move MB | GB/s | %% of copy "
        "| TFLOP/s | %% of bf16 peak |\n|---|---|---|---|---|---|---|---|\n");
    for (int64_t b : {1, 8, 64, 256, 1024}) {
      if (batch_only != 0 && b != batch_only) continue;
      for (const char* prec : {"fp32", "bf16", "bf16-mma"}) {
        if (!prec_only.empty() && prec_only != prec) continue;
        const bool f32 = std::strcmp(prec, "fp32") == 0;
        const bool mma = std::strcmp(prec, "bf16-mma") == 0;
        di::SparseAttnParams p;
        p.q = q.data();
        p.out = out.data();
        p.rows = b;
        p.precision = f32 ? di::ActPrecision::kF32 : di::ActPrecision::kBF16;
        p.tensor_kernel = mma ? di::AttnTensorKernel::kMmaSync : di::AttnTensorKernel::kAuto;
        p.seq = d_seq.as<int32_t>();
        p.pos = d_pos.as<int64_t>();
        p.chunk_start = d_cs.as<int64_t>();
        p.chunk_row0 = d_r0.as<int64_t>();
        p.swa = {swa.as<uint8_t>(), swa_page, d_sp.as<int32_t>(),
                 swa_pages,         64,       di::kSwaEntryBytes};
        p.ring_block = 0;
        p.window = kWin;
        p.comp = {comp.as<uint8_t>(), comp_page, d_cp.as<int32_t>(),
                  comp_pages,         64,        di::kCompEntryBytes};
        p.topk = d_topk.as<int32_t>();
        p.topk_width = kTopk;
        p.comp_entries = kComp;
        p.sink = d_sink.as<float>();
        p.scale = 1.0f / std::sqrt(512.0f);
        p.rope_freqs = d_freqs.as<float>();
        const double med = di::bench::graph_time_us(
            stream, 20, [&](int, cudaStream_t st) { di::sparse_attention(p, st); });
        const double esz = f32 ? 4.0 : 2.0;
        const double bytes =
            static_cast<double>(b) * (kWin * di::kSwaEntryBytes + kTopk * di::kCompEntryBytes +
                                      2.0 * 64 * 512 * esz + kTopk * 4.0);
        const double flops = static_cast<double>(b) * 2.0 * 2.0 * 64 * (kWin + kTopk) * 512;
        const double gbs = bytes / (med * 1e-6) / 1e9;
        const double tflops = flops / (med * 1e-6) / 1e12;
        std::printf("| %lld | %s | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f |\n",
                    static_cast<long long>(b), prec, med, bytes / 1e6, gbs, 100.0 * gbs / copy_gbs,
                    tflops, 100.0 * tflops / peak);
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
}
