// mhc_bench: the fused mHC kernels at V4.1 dims (D = 5120, hc = 4) for T in {1 .. 16384}, both
// storages, against the device-to-device copy bandwidth measured in the same run.
// Bytes that must move: pre = stream read + collapsed written + carried pre read + 24 mixes
// written + fn read; post = y + old stream read + new stream written + 20 coefficients read.
// The pre side's workspace traffic (partial sums, 16 splits x 25 floats per token) is overhead
// and is not counted. Prints one line per (side, storage, T); stdout carries results only.
// pre = mhc_pre (default: 2-stage pipeline, 3 CTAs/SM, persistent grid), pre3 = the 3-stage
// variant (2 CTAs/SM), preI = 2 stages with one CTA per (split, token tile) item.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/error.h"
#include "kernels/cuda/mhc/mhc.cuh"

namespace {

using di::DeviceBuffer;
using di::MhcStorage;

struct Timing {
  float best_ms, median_ms;
};

template <typename Fn>
Timing time_ms(cudaStream_t stream, int iters, Fn&& launch) {
  di::Event start(true), stop(true);
  for (int i = 0; i < 3; ++i)
    launch();
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    launch();
    stop.record(stream);
    stop.synchronize();
    t.push_back(di::Event::elapsed_ms(start, stop));
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

// Fills `b` with random non-zero-ish bytes that are finite values of the storage type: a 16 MiB
// host pattern of N(0,1) values, repeated with device copies.
void fill_random(DeviceBuffer& b, MhcStorage st, cudaStream_t stream) {
  const size_t pattern = std::min<size_t>(b.size(), 16u << 20);
  std::vector<uint8_t> host(pattern);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  if (st == MhcStorage::kF32) {
    for (size_t i = 0; i + 4 <= pattern; i += 4) {
      const float v = dist(rng);
      std::memcpy(host.data() + i, &v, 4);
    }
  } else {
    for (size_t i = 0; i + 2 <= pattern; i += 2) {
      const float v = dist(rng);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(host.data() + i, &h, 2);
    }
  }
  DI_CUDA_CHECK(cudaMemcpyAsync(b.data(), host.data(), pattern, cudaMemcpyHostToDevice, stream));
  for (size_t off = pattern; off < b.size(); off += pattern) {
    const size_t n = std::min(pattern, b.size() - off);
    DI_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(b.data()) + off, b.data(), n,
                                  cudaMemcpyDeviceToDevice, stream));
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

// `mhc_bench [T [bf16|fp32]]`: only batch T, only that storage.
int main(int argc, char** argv) {
  try {
    const int64_t t_only = argc > 1 ? std::stoll(argv[1]) : 0;
    const std::string st_only = argc > 2 ? argv[2] : "";
    if (di::cuda_device_count() == 0) {
      std::fprintf(stderr, "mhc_bench: no CUDA device\n");
      return 77;
    }
    const di::DeviceInfo info = di::device_info(0);
    std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)\n", info.name.c_str(), info.sm_major,
                info.sm_minor, info.sm_count, static_cast<double>(info.total_mem) / (1ull << 30));
    di::Stream stream;
    const cudaStream_t s = stream.get();
    const size_t copy_bytes = 2ull << 30;
    double copy_gbs = 0;
    {
      DeviceBuffer a(copy_bytes, "copy src"), b(copy_bytes, "copy dst");
      a.fill_async(1, s);
      const Timing c = time_ms(s, 10, [&] {
        DI_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), copy_bytes, cudaMemcpyDeviceToDevice, s));
      });
      copy_gbs = 2.0 * copy_bytes / (c.best_ms * 1e-3) / 1e9;
      std::printf("ceiling: D2D copy %.1f GB/s (read+write of 2 GiB, best of 10)\n", copy_gbs);
    }

    const int64_t dim = 5120, hc = di::kMhcStreams, mix = di::kMhcMixes;
    const int64_t t_max = 16384;
    std::vector<float> fn(static_cast<size_t>(di::kMhcMixes) * di::kMhcStreams * dim);
    std::vector<uint32_t> packed(di::mhc_fn_packed_words(dim));
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 0.01f);
    for (auto& v : fn)
      v = dist(rng);
    di::mhc_pack_fn(fn.data(), dim, packed.data());
    const float scale[3] = {0.8f, 0.6f, 1.3f};
    std::vector<float> base(mix, 0.1f), carried(static_cast<size_t>(t_max * hc), 0.25f);
    DeviceBuffer fd(packed.size() * 4, "fn"), sd(12, "scale"), bd(mix * 4, "base"),
        cd(carried.size() * 4, "carried");
    fd.copy_from_host_async(packed.data(), fd.size(), s);
    sd.copy_from_host_async(scale, 12, s);
    bd.copy_from_host_async(base.data(), bd.size(), s);
    cd.copy_from_host_async(carried.data(), cd.size(), s);
    DeviceBuffer pre(static_cast<size_t>(t_max * hc) * 4, "pre"),
        post(static_cast<size_t>(t_max * hc) * 4, "post"),
        comb(static_cast<size_t>(t_max * hc * hc) * 4, "comb");
    DeviceBuffer ws(di::mhc_pre_workspace_bytes(t_max, dim), "workspace");

    std::printf("%-5s %-5s %6s %10s %10s %10s %10s %8s\n", "side", "store", "T", "MB moved",
                "best us", "median us", "GB/s", "of copy");
    for (MhcStorage st : {MhcStorage::kBf16, MhcStorage::kF32}) {
      const size_t es = st == MhcStorage::kF32 ? 4 : 2;
      const char* sname = st == MhcStorage::kF32 ? "fp32" : "bf16";
      if (!st_only.empty() && st_only != sname) continue;
      DeviceBuffer x(static_cast<size_t>(t_max * hc * dim) * es, "stream"),
          x2(static_cast<size_t>(t_max * hc * dim) * es, "stream out"),
          col(static_cast<size_t>(t_max * dim) * es, "collapsed");
      fill_random(x, st, s);
      fill_random(col, st, s);
      for (int64_t t : {1, 8, 64, 256, 4096, 16384}) {
        if (t_only > 0 && t != t_only) continue;
        di::MhcPreParams p;
        p.stream = x.data();
        p.fn_packed = fd.as<uint32_t>();
        p.scale = sd.as<float>();
        p.base = bd.as<float>();
        p.carried_pre = cd.as<float>();
        p.tokens = t;
        p.dim = dim;
        p.storage = st;
        p.collapsed = col.data();
        p.pre = pre.as<float>();
        p.post = post.as<float>();
        p.comb = comb.as<float>();
        p.workspace = ws.as<float>();
        const int iters = t >= 4096 ? 20 : 50;
        const Timing tp = time_ms(s, iters, [&] { di::mhc_pre(p, s); });
        // The variants: large tiles, 2 stages (the default above 128 tokens); small tiles with 2
        // stages (mhc_pre uses 3 up to 128 tokens).
        const Timing tp2 = time_ms(s, iters, [&] {
          di::mhc_pre_with_config(p, 2, di::MhcPreGrid::kPersistent, s, di::MhcPreTile::kLarge);
        });
        const Timing tpi = time_ms(s, iters, [&] {
          di::mhc_pre_with_config(p, 2, di::MhcPreGrid::kPersistent, s, di::MhcPreTile::kSmall);
        });
        const double pre_bytes = static_cast<double>(t * hc * dim * es + t * dim * es) +
                                 static_cast<double>(t * hc * 4 + t * mix * 4) +
                                 static_cast<double>(mix * hc * dim * 4);
        di::MhcPostParams q;
        q.y = col.data();
        q.stream_in = x.data();
        q.post = post.as<float>();
        q.comb = comb.as<float>();
        q.tokens = t;
        q.dim = dim;
        q.storage = st;
        q.stream_out = x2.data();
        const Timing tq = time_ms(s, iters, [&] { di::mhc_post(q, s); });
        const double post_bytes = static_cast<double>(t * dim * es + 2 * t * hc * dim * es) +
                                  static_cast<double>(t * (hc + hc * hc) * 4);
        const double pre_gbs = pre_bytes / (tp.best_ms * 1e-3) / 1e9;
        const double post_gbs = post_bytes / (tq.best_ms * 1e-3) / 1e9;
        std::printf("%-5s %-5s %6lld %10.2f %10.1f %10.1f %10.1f %7.0f%%\n", "pre", sname,
                    static_cast<long long>(t), pre_bytes / 1e6, tp.best_ms * 1e3,
                    tp.median_ms * 1e3, pre_gbs, 100.0 * pre_gbs / copy_gbs);
        const double pre2_gbs = pre_bytes / (tp2.best_ms * 1e-3) / 1e9;
        std::printf("%-5s %-5s %6lld %10.2f %10.1f %10.1f %10.1f %7.0f%%\n", "preL", sname,
                    static_cast<long long>(t), pre_bytes / 1e6, tp2.best_ms * 1e3,
                    tp2.median_ms * 1e3, pre2_gbs, 100.0 * pre2_gbs / copy_gbs);
        const double prei_gbs = pre_bytes / (tpi.best_ms * 1e-3) / 1e9;
        std::printf("%-5s %-5s %6lld %10.2f %10.1f %10.1f %10.1f %7.0f%%\n", "preS2", sname,
                    static_cast<long long>(t), pre_bytes / 1e6, tpi.best_ms * 1e3,
                    tpi.median_ms * 1e3, prei_gbs, 100.0 * prei_gbs / copy_gbs);
        std::printf("%-5s %-5s %6lld %10.2f %10.1f %10.1f %10.1f %7.0f%%\n", "post", sname,
                    static_cast<long long>(t), post_bytes / 1e6, tq.best_ms * 1e3,
                    tq.median_ms * 1e3, post_gbs, 100.0 * post_gbs / copy_gbs);
      }
    }
    return 0;
  } catch (const di::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
