// Grouped low-rank attention output projection wo_a at V4.1 size: o [rows, 8 x 4096] times the
// FP8 e4m3 wo_a [8 x 1024, 4096] with UE8M0 scales per 32 x 32 block (33.6 MB of weights and
// scales per layer; V4's 128 x 128 blocks too). Each line gives the per-launch time (CUDA graph of
// 16 launches, median of 5 replays), the weight bytes (codes + scales) streamed per second, that
// rate as a fraction of the device-to-device copy bandwidth measured in the same run (target >=
// 70 % at <= 16 rows), and the FLOP rate. Consecutive launches read 4 different weight copies
// (134 MB, more than the 50 MB L2), like the layers of a decode step.
//
// Usage: wo_a_bench [rows]   (default 1, 8, 16, 64 and 256)

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "kernels/cuda/wo_a/wo_a.cuh"

namespace di {
namespace {

constexpr int64_t kG = 8;
constexpr int64_t kR = 1024;
constexpr int64_t kGw = 4096;
constexpr int kCopies = 4;
constexpr int kReps = 16;

int run(int64_t only_rows) {
  if (cuda_device_count() == 0) {
    std::printf("wo_a_bench: no CUDA device\n");
    return 0;
  }
  Stream stream;
  const cudaStream_t st = stream.get();
  const double copy = bench::copy_gbs(stream);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy);
  std::printf("wo_a: %ld groups x rank %ld over %ld columns, K split %d\n", static_cast<long>(kG),
              static_cast<long>(kR), static_cast<long>(kGw), wo_a_k_split(kGw));
  std::printf("%6s %5s %5s %10s %10s %8s %10s\n", "rows", "prec", "block", "us", "GB/s", "of copy",
              "TFLOP/s");

  const size_t codes = static_cast<size_t>(kG * kR * kGw);
  // The byte values do not change the kernel's work: e4m3 0x38 = 1.0, scale 2^-7.
  std::vector<DeviceBuffer> weights, scales;
  for (int i = 0; i < kCopies; ++i) {
    weights.emplace_back(codes, "wo_a codes");
    weights.back().fill_async(0x38, st);
    scales.emplace_back(codes / (32 * 32), "wo_a scales");
    scales.back().fill_async(120, st);
  }
  for (const int64_t rows : {1, 8, 16, 64, 256}) {
    if (only_rows > 0 && rows != only_rows) continue;
    for (const int block : {32, 128}) {
      for (const ActPrecision prec : {ActPrecision::kF32, ActPrecision::kBF16}) {
        if (block == 128 && prec == ActPrecision::kBF16) continue;
        const size_t esize = prec == ActPrecision::kF32 ? 4 : 2;
        DeviceBuffer o(static_cast<size_t>(rows * kG * kGw) * esize, "o");
        DeviceBuffer z(static_cast<size_t>(rows * kG * kR) * esize, "z");
        o.fill_async(0x3C, st);  // small finite values in either storage
        const double us = bench::graph_time_us(stream, kReps, [&](int i, cudaStream_t s) {
          WoAParams p;
          p.o = o.data();
          p.precision = prec;
          p.weight = weights[static_cast<size_t>(i % kCopies)].as<uint8_t>();
          p.weight_scale = scales[static_cast<size_t>(i % kCopies)].as<uint8_t>();
          p.block = block;
          p.rows = rows;
          p.groups = kG;
          p.rank = kR;
          p.group_width = kGw;
          p.z = z.data();
          wo_a(p, s);
        });
        const double bytes =
            static_cast<double>(codes + codes / (static_cast<size_t>(block) * block));
        const double gbs = bytes / (us * 1e-6) / 1e9;
        const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(codes);
        std::printf("%6ld %5s %5d %10.2f %10.0f %7.1f%% %10.1f\n", static_cast<long>(rows),
                    prec == ActPrecision::kF32 ? "fp32" : "bf16", block, us, gbs,
                    100.0 * gbs / copy, flops / (us * 1e-6) / 1e12);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace di

int main(int argc, char** argv) {
  try {
    return di::run(argc > 1 ? std::atoll(argv[1]) : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wo_a_bench: %s\n", e.what());
    return 1;
  }
}
