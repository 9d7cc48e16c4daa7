// dense_ops_bench: the dense small ops of issue 6 on the GPU at decode (M = 1..256) and prefill
// (M = 4096+) sizes: time, achieved GB/s on the bytes each op must move, and the ratio to the
// device-to-device copy bandwidth measured in the same run (read + write bytes). The LM head also
// reports TFLOP/s (it turns FFMA-bound past M ~ 16). Inputs are random, never zeros. Small-M
// inputs of the memory-bound ops fit in L2, so their GB/s can exceed DRAM bandwidth: the
// prefill rows are the DRAM numbers. Prints one summary line per case.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "common/bf16.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/ops/act_quant.cuh"
#include "kernels/cuda/ops/embedding.cuh"
#include "kernels/cuda/ops/lm_head.cuh"
#include "kernels/cuda/ops/rmsnorm.cuh"
#include "kernels/cuda/ops/rope.cuh"
#include "kernels/cuda/ops/sampler.cuh"

namespace {

using di::DeviceBuffer;

// Median over 7 trials of the mean time in ms of `reps` back-to-back launches (after warm-up).
template <typename Fn>
double time_ms(cudaStream_t stream, int reps, Fn&& launch) {
  di::Event start(true), stop(true);
  for (int i = 0; i < 3; ++i)
    launch();
  std::vector<double> t;
  for (int trial = 0; trial < 7; ++trial) {
    start.record(stream);
    for (int i = 0; i < reps; ++i)
      launch();
    stop.record(stream);
    stop.synchronize();
    t.push_back(static_cast<double>(di::Event::elapsed_ms(start, stop)) / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

DeviceBuffer random_buffer(size_t bytes, uint64_t seed, cudaStream_t stream, bool bf16 = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  DeviceBuffer b(bytes, "bench input");
  if (bf16) {
    std::vector<uint16_t> h(bytes / 2);
    for (auto& x : h)
      x = di::bf16_from_float(d(rng) * 0.05f);
    b.copy_from_host_async(h.data(), bytes, stream);
  } else {
    std::vector<float> h(bytes / 4);
    for (auto& x : h)
      x = d(rng);
    b.copy_from_host_async(h.data(), bytes, stream);
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  return b;
}

double g_copy_gbs = 0;

void report(const char* op, const char* shape, int64_t m, double ms, double bytes,
            double flops = 0) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-22s %-26s M=%-6lld %10.2f us %9.1f GB/s %6.1f%% of copy", op, shape,
              static_cast<long long>(m), ms * 1e3, gbs, 100.0 * gbs / g_copy_gbs);
  if (flops > 0) std::printf(" %7.2f TFLOP/s", flops / (ms * 1e-3) / 1e12);
  std::printf("\n");
}

}  // namespace

int main() {
  if (di::cuda_device_count() == 0) {
    std::fprintf(stderr, "dense_ops_bench: no CUDA device\n");
    return 1;
  }
  const di::DeviceInfo info = di::device_info(0);
  std::printf("device: %s, %d SMs\n", info.name.c_str(), info.sm_count);
  di::Stream stream;
  const cudaStream_t s = stream.get();

  {  // Copy ceiling: 2 GiB device-to-device, read + write bytes.
    const size_t bytes = size_t{2} << 30;
    DeviceBuffer a(bytes, "copy src"), b(bytes, "copy dst");
    a.fill_async(1, s);
    const double ms = time_ms(s, 5, [&] {
      DI_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    g_copy_gbs = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
    std::printf("%-22s %-26s %10.2f us %9.1f GB/s (ceiling)\n", "d2d copy", "2 GiB", ms * 1e3,
                g_copy_gbs);
  }

  const int64_t dim = 5120;
  const int64_t max_m = 16384;
  DeviceBuffer x = random_buffer(static_cast<size_t>(max_m * dim * 4), 1, s);
  DeviceBuffer xb = random_buffer(static_cast<size_t>(max_m * dim * 2), 2, s, true);
  DeviceBuffer w = random_buffer(static_cast<size_t>(dim * 4), 3, s);
  DeviceBuffer y(static_cast<size_t>(max_m * dim * 4), "y");
  DeviceBuffer codes(static_cast<size_t>(max_m * dim), "codes");
  DeviceBuffer scales(static_cast<size_t>(max_m * dim / 32), "scales");
  const std::vector<int64_t> ms_list = {1, 16, 64, 256, 4096, 16384};

  for (const int64_t m : ms_list) {
    di::RmsNormParams p;
    p.x = x.data();
    p.weight = w.as<float>();
    p.y = y.data();
    p.rows = m;
    p.dim = dim;
    const double t = time_ms(s, 50, [&] { di::rms_norm(p, s); });
    report("rms_norm fp32", "[M, 5120]", m, t, static_cast<double>(m * dim * 8 + dim * 4));
  }
  for (const int64_t m : ms_list) {
    di::RmsNormParams p;
    p.x = xb.data();
    p.weight = w.as<float>();
    p.y = y.data();
    p.rows = m;
    p.dim = dim;
    p.precision = di::ActPrecision::kBF16;
    const double t = time_ms(s, 50, [&] { di::rms_norm(p, s); });
    report("rms_norm bf16", "[M, 5120]", m, t, static_cast<double>(m * dim * 4 + dim * 4));
  }
  for (const int64_t m : ms_list) {
    di::RmsNormQuantParams p;
    p.norm.x = x.data();
    p.norm.weight = w.as<float>();
    p.norm.rows = m;
    p.norm.dim = dim;
    p.codes = codes.as<uint8_t>();
    p.scales = scales.as<uint8_t>();
    p.block = 32;
    const double t = time_ms(s, 50, [&] { di::rms_norm_act_quant(p, s); });
    report("rms_norm+act_quant", "fp32 [M, 5120] blk32", m, t,
           static_cast<double>(m * dim * 4 + m * dim + m * dim / 32 + dim * 4));
  }
  for (const int64_t m : ms_list) {
    di::ActQuantParams p;
    p.x = x.data();
    p.codes = codes.as<uint8_t>();
    p.scales = scales.as<uint8_t>();
    p.rows = m;
    p.dim = dim;
    p.block = 32;
    const double t = time_ms(s, 50, [&] { di::act_quant(p, s); });
    report("act_quant", "fp32 [M, 5120] blk32", m, t,
           static_cast<double>(m * dim * 4 + m * dim + m * dim / 32));
  }

  {  // RoPE on q [M, 64, 512] (rope tail 64) with the YaRN table.
    di::cpu::RopeParams rp;
    rp.base = 160000;
    rp.original_seq_len = 65536;
    rp.factor = 16;
    const auto freqs = di::cpu::rope_frequencies<float>(rp);
    DeviceBuffer fd(freqs.size() * 4, "freqs");
    fd.copy_from_host_async(freqs.data(), freqs.size() * 4, s);
    std::vector<int64_t> pos(4096);
    for (size_t i = 0; i < pos.size(); ++i)
      pos[i] = static_cast<int64_t>(i * 37 + 1000);
    DeviceBuffer pd(pos.size() * 8, "positions");
    pd.copy_from_host_async(pos.data(), pos.size() * 8, s);
    DeviceBuffer q = random_buffer(size_t{4096} * 64 * 512 * 4, 4, s);
    for (const int64_t m : {int64_t{1}, int64_t{64}, int64_t{256}, int64_t{4096}}) {
      di::RopeApplyParams p;
      p.x = q.data();
      p.positions = pd.as<int64_t>();
      p.freqs = fd.as<float>();
      p.rows = m;
      p.heads = 64;
      p.head_dim = 512;
      p.rope_dim = 64;
      const double t = time_ms(s, 50, [&] { di::apply_rope(p, s); });
      report("rope fp32", "q [M, 64, 512] tail 64", m, t, static_cast<double>(m * 64 * 64 * 8));
    }
  }

  const int64_t vocab = 129280;
  DeviceBuffer table = random_buffer(static_cast<size_t>(vocab * dim * 2), 5, s, true);
  {  // Embedding into the hc stream (4 fp32 copies).
    std::vector<int64_t> ids(4096);
    std::mt19937_64 rng(6);
    for (auto& id : ids)
      id = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
    DeviceBuffer idd(ids.size() * 8, "ids");
    idd.copy_from_host_async(ids.data(), ids.size() * 8, s);
    DeviceBuffer out(size_t{4096} * 4 * dim * 4, "hc");
    for (const int64_t m : {int64_t{1}, int64_t{64}, int64_t{256}, int64_t{4096}}) {
      di::EmbeddingParams p;
      p.table = table.as<uint16_t>();
      p.ids = idd.as<int64_t>();
      p.out = out.data();
      p.rows = m;
      p.vocab = vocab;
      p.dim = dim;
      p.copies = 4;
      const double t = time_ms(s, 50, [&] { di::embedding_gather(p, s); });
      report("embedding x4 fp32", "[M] -> [M, 4, 5120]", m, t,
             static_cast<double>(m * dim * 2 + m * 4 * dim * 4));
    }
  }

  {  // LM head: bytes = weight streamed once + x + logits.
    DeviceBuffer logits(size_t{256} * vocab * 4, "logits");
    for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{16},
                            int64_t{32}, int64_t{64}, int64_t{256}}) {
      di::LmHeadParams p;
      p.x = x.as<float>();
      p.weight = table.as<uint16_t>();
      p.logits = logits.as<float>();
      p.rows = m;
      p.vocab = vocab;
      p.dim = dim;
      const double t = time_ms(s, m <= 16 ? 10 : 3, [&] { di::lm_head_cuda_core(p, s); });
      report("lm_head", "[M,5120]x[129280,5120]", m, t,
             static_cast<double>(vocab * dim * 2 + m * dim * 4 + m * vocab * 4),
             2.0 * static_cast<double>(m) * vocab * dim);
      // The tensor-core head (not yet dispatched by lm_head), fp32 and bf16 activations.
      const double tc = time_ms(s, m <= 16 ? 10 : 3, [&] { di::lm_head_tensor_core(p, s); });
      report("lm_head_tc fp32 x", "[M,5120]x[129280,5120]", m, tc,
             static_cast<double>(vocab * dim * 2 + m * dim * 4 + m * vocab * 4),
             2.0 * static_cast<double>(m) * vocab * dim);
      p.x_precision = di::ActPrecision::kBF16;  // x's bytes read as bf16: any values do
      const double tb = time_ms(s, m <= 16 ? 10 : 3, [&] { di::lm_head_tensor_core(p, s); });
      report("lm_head_tc bf16 x", "[M,5120]x[129280,5120]", m, tb,
             static_cast<double>(vocab * dim * 2 + m * dim * 2 + m * vocab * 4),
             2.0 * static_cast<double>(m) * vocab * dim);
    }
  }

  {  // Small heads through lm_head (the router [384, 5120], the compressor's [512, 5120], the
     // indexer's weights [32, 5120]; bf16 rows as in the bf16 forward): 16 weight copies rotated
     // (> L2, as a forward's layers are), bytes = weight + x + logits.
    struct Small {
      const char* name;
      int64_t vocab;
    };
    for (const Small sh : {Small{"[M,5120]x[384,5120]", 384}, Small{"[M,5120]x[512,5120]", 512},
                           Small{"[M,5120]x[32,5120]", 32}}) {
      constexpr int kCopies = 16;
      const size_t wbytes = static_cast<size_t>(sh.vocab * dim * 2);
      DeviceBuffer ws = random_buffer(wbytes * kCopies, 11, s, true);
      DeviceBuffer logits(size_t{4096} * static_cast<size_t>(sh.vocab) * 4, "logits");
      // 4096: a prefill chunk's rows (the same kernel, for batch invariance): FMA-bound on the CUDA
      // cores, the TFLOP/s column is the figure to read there.
      for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{256}, int64_t{4096}}) {
        di::LmHeadParams p;
        p.x = xb.data();
        p.x_precision = di::ActPrecision::kBF16;
        p.logits = logits.as<float>();
        p.rows = m;
        p.vocab = sh.vocab;
        p.dim = dim;
        int copy = 0;
        const double t = time_ms(s, m >= 4096 ? 4 : 32, [&] {
          p.weight = ws.as<uint16_t>() + static_cast<size_t>(copy++ % kCopies) * wbytes / 2;
          di::lm_head(p, s);
        });
        report("lm_head small bf16 x", sh.name, m, t,
               static_cast<double>(wbytes + static_cast<size_t>(m * dim * 2 + m * sh.vocab * 4)),
               2.0 * static_cast<double>(m) * static_cast<double>(sh.vocab) * dim);
      }
    }
  }

  {  // Sampler: vocab 129,280, random logits N(0, 3^2).
    const int64_t rows = 256;
    DeviceBuffer logits = random_buffer(static_cast<size_t>(rows * vocab * 4), 7, s);
    DeviceBuffer ws(di::sampler_workspace_bytes(rows, vocab), "workspace");
    DeviceBuffer tok(static_cast<size_t>(rows) * 8, "tokens"),
        st(static_cast<size_t>(rows) * 4, "status");
    struct Mode {
      const char* name;
      double t, top_p;
      int64_t top_k;
    };
    for (const Mode mode :
         {Mode{"greedy", 0.0, 1.0, 0}, Mode{"T=1", 1.0, 1.0, 0}, Mode{"top_p=0.9", 1.0, 0.9, 0},
          Mode{"top_k=50 top_p=0.9", 0.8, 0.9, 50}}) {
      deepinfer::SamplingParams sp;
      sp.temperature = mode.t;
      sp.top_p = mode.top_p;
      sp.top_k = mode.top_k;
      std::vector<int64_t> ids;
      std::vector<di::SamplerRowParams> rps;
      for (int64_t r = 0; r < rows; ++r)
        rps.push_back(di::make_sampler_row(sp, 42 + r, 100 + r, {}, {}, {}, false, vocab, ids));
      ids.push_back(0);
      DeviceBuffer rd(rps.size() * sizeof(di::SamplerRowParams), "rows");
      rd.copy_from_host_async(rps.data(), rps.size() * sizeof(di::SamplerRowParams), s);
      DeviceBuffer idd(ids.size() * 8, "ids");
      idd.copy_from_host_async(ids.data(), ids.size() * 8, s);
      for (const int64_t m : {int64_t{1}, int64_t{32}, int64_t{256}}) {
        di::SamplerParams p;
        p.logits = logits.as<float>();
        p.row_params = rd.as<di::SamplerRowParams>();
        p.ids = idd.as<int64_t>();
        p.rows = m;
        p.vocab = vocab;
        p.workspace = ws.data();
        p.tokens = tok.as<int64_t>();
        p.status = st.as<int32_t>();
        const double t = time_ms(s, 5, [&] { di::sample_rows(p, s); });
        char shape[64];
        std::snprintf(shape, sizeof(shape), "%s", mode.name);
        report("sampler", shape, m, t, static_cast<double>(m * vocab * 4));
      }
    }
  }
  return 0;
}
