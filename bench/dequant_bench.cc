// dequant_bench: GPU FP8 (block-scaled) and FP4 (1x32) -> bf16 dequantization at real V4.1/V4
// weight shapes, against the device-to-device copy bandwidth measured in the same run.
// Bytes moved = weight + scales read + bf16 written. Prints one summary line per shape.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/error.h"
#include "kernels/cuda/dequant.cuh"

namespace {

using di::DeviceBuffer;

// Best-of-N time in ms of `launch` on `stream` (after two warm-ups).
template <typename Fn>
float time_best_ms(cudaStream_t stream, int iters, Fn&& launch) {
  di::Event start(true), stop(true);
  for (int i = 0; i < 2; ++i)
    launch();
  float best = 1e30f;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    launch();
    stop.record(stream);
    stop.synchronize();
    best = std::min(best, di::Event::elapsed_ms(start, stop));
  }
  return best;
}

struct Shape {
  const char* name;
  int64_t n, k;
  int bn, bk;  // 0 = FP4 rows
};

}  // namespace

int main() {
  try {
    if (di::cuda_device_count() == 0) {
      std::fprintf(stderr, "dequant_bench: no CUDA device\n");
      return 77;
    }
    const di::DeviceInfo info = di::device_info(0);
    std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)\n", info.name.c_str(), info.sm_major,
                info.sm_minor, info.sm_count, static_cast<double>(info.total_mem) / (1ull << 30));
    di::Stream stream;
    // Ceiling: device-to-device copy of 2 GiB, counting bytes read + written.
    const size_t copy_bytes = 2ull << 30;
    DeviceBuffer a(copy_bytes, "copy src"), b(copy_bytes, "copy dst");
    a.fill_async(1, stream.get());
    const float copy_ms = time_best_ms(stream.get(), 10, [&] {
      DI_CUDA_CHECK(
          cudaMemcpyAsync(b.data(), a.data(), copy_bytes, cudaMemcpyDeviceToDevice, stream.get()));
    });
    const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
    std::printf("ceiling: D2D copy %.1f GB/s (read+write of 2 GiB, best of 10)\n", copy_gbs);

    const std::vector<Shape> shapes = {
        {"v41 wq_b fp8 32x32", 32768, 1280, 32, 32},
        {"v41 wo_b fp8 32x32", 5120, 8192, 32, 32},
        {"v41 wo_a fp8 32x32", 8192, 4096, 32, 32},
        {"v41 shared w1 fp8 32x32", 2304, 5120, 32, 32},
        {"v4 wq_b fp8 128x128", 32768, 1024, 128, 128},
        {"v41 engram rows fp8 1x32 (1M rows)", 1 << 20, 256, 1, 32},
        {"v41 expert w1 fp4 1x32", 2304, 5120, 0, 0},
        {"v41 16 experts w1 fp4 1x32", 16 * 2304, 5120, 0, 0},
        {"v41 expert w2 fp4 1x32", 5120, 2304, 0, 0},
    };
    std::printf("%-38s %10s %10s %10s %8s\n", "op", "MB moved", "time us", "GB/s", "of copy");
    for (const Shape& s : shapes) {
      const bool fp4 = s.bn == 0;
      const size_t w_bytes = static_cast<size_t>(fp4 ? s.n * s.k / 2 : s.n * s.k);
      const size_t s_bytes = static_cast<size_t>(
          fp4 ? s.n * ((s.k + 31) / 32) : ((s.n + s.bn - 1) / s.bn) * ((s.k + s.bk - 1) / s.bk));
      const size_t o_bytes = static_cast<size_t>(s.n * s.k * 2);
      DeviceBuffer w(w_bytes, "weight"), sc(s_bytes, "scale"), out(o_bytes, "out");
      w.fill_async(0x3A, stream.get());
      sc.fill_async(120, stream.get());
      float ms = 0;
      if (fp4) {
        di::DequantFp4Params p{w.as<uint8_t>(), sc.as<uint8_t>(), s.n, s.k, out.as<uint16_t>()};
        ms = time_best_ms(stream.get(), 20, [&] { di::dequant_fp4_to_bf16(p, stream.get()); });
      } else {
        di::DequantFp8Params p{w.as<uint8_t>(),   sc.as<uint8_t>(), s.n, s.k, s.bn, s.bk,
                               out.as<uint16_t>()};
        ms = time_best_ms(stream.get(), 20, [&] { di::dequant_fp8_to_bf16(p, stream.get()); });
      }
      const double bytes = static_cast<double>(w_bytes + s_bytes + o_bytes);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("%-38s %10.1f %10.1f %10.1f %7.0f%%\n", s.name, bytes / 1e6, ms * 1e3, gbs,
                  100.0 * gbs / copy_gbs);
    }
    return 0;
  } catch (const di::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
