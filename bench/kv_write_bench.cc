// V4.1 cache writers on the GPU (issue 7, kernels/cuda/kv_write): window KV write, ratio-1 and
// ratio-2 compressors, index-key projection, at decode (batch 1 / 64 / 256) and prefill (8192 rows
// = 64 sequences x 128) sizes. Each line gives the per-launch time (CUDA graph of 20 launches,
// median of 5 replays), the bytes a launch must move (activation rows in, entries and latents out;
// the weights counted once) and that traffic over the device-to-device copy bandwidth measured in
// the same run. These ops move ~2.5 KB per row: at decode sizes they are launch/latency-bound by
// design (one CTA per row; the per-row norm is one thread's sequential sum for bitwise CPU
// parity), so the useful numbers are the microseconds, and the bandwidth ratio only at prefill.
//
// Usage: kv_write_bench

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "common/bf16.h"
#include "kernels/cuda/kv_write/kv_write.cuh"

namespace di {
namespace {

using bench::upload;

constexpr int kWindow = 128;

double time_us(Stream& stream, int reps, const std::function<void(cudaStream_t)>& work) {
  return bench::graph_time_us(stream, reps, [&](int, cudaStream_t s) { work(s); });
}

double copy_gbs(Stream& stream) {
  return bench::copy_gbs(stream, size_t{1} << 30);
}

std::vector<float> random_rows(int64_t rows, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(rows * kKvDim));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : v)
    x = nd(rng);
  return v;
}

// A paged table of `seqs` sequences x `entries` entries, 16 per page, shuffled page ids.
struct Table {
  DeviceBuffer pool, pages;
  PagedTable t;
  Table(int64_t seqs, int64_t entries, int32_t entry_bytes, cudaStream_t stream) {
    t.entry_bytes = entry_bytes;
    t.entries_per_page = 16;
    t.page_bytes = (16 * entry_bytes + 15) / 16 * 16;
    t.pages_stride = static_cast<int32_t>((entries + 15) / 16);
    std::vector<int32_t> ids(static_cast<size_t>(seqs * t.pages_stride));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(1));
    pool = DeviceBuffer(ids.size() * static_cast<size_t>(t.page_bytes), "bench pool");
    pool.fill_async(0, stream);
    pages = upload(ids, stream, "bench pages");
    t.pool = pool.as<uint8_t>();
    t.pages = pages.as<int32_t>();
  }
};

// Rows of `seqs` sequences, `per_seq` consecutive positions each starting at `start`.
struct Rows {
  std::vector<int32_t> seq;
  std::vector<int64_t> pos;
  std::vector<int64_t> end;
  Rows(int64_t seqs, int64_t per_seq, int64_t start) {
    for (int64_t s = 0; s < seqs; ++s) {
      for (int64_t i = 0; i < per_seq; ++i) {
        seq.push_back(static_cast<int32_t>(s));
        pos.push_back(start + i);
      }
      end.push_back(start + per_seq);
    }
  }
};

void report(const char* name, int64_t rows, double us, double bytes, double copy) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  std::printf("%-22s rows=%-5lld %8.2f us | %8.3f MB moved %7.0f GB/s = %5.1f%% of copy\n", name,
              static_cast<long long>(rows), us, bytes / 1e6, gbs, 100.0 * gbs / copy);
}

void bench_all(Stream& stream, double copy) {
  const cudaStream_t st = stream.get();
  std::vector<float> freqs(kKvRopeDim / 2);
  for (size_t i = 0; i < freqs.size(); ++i)
    freqs[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / kKvRopeDim);
  const auto freqs_d = upload(freqs, st, "freqs");
  const auto norm_d = upload(std::vector<float>(kKvDim, 1.0f), st, "norm");
  std::vector<uint16_t> wk(size_t{kIndexDim} * kKvDim);
  for (size_t i = 0; i < wk.size(); ++i)
    wk[i] = bf16_from_float(0.01f * static_cast<float>(static_cast<int>(i % 17) - 8));
  const auto wk_d = upload(wk, st, "wk");
  const auto x_d = upload(random_rows(8192, 1), st, "x");
  const auto s_d = upload(random_rows(8192, 2), st, "score");
  DeviceBuffer latent_d(size_t{8192} * kKvDim * 4, "latent");

  struct Case {
    const char* name;
    int64_t seqs, per_seq, start;
  };
  const Case cases[] = {{"decode b=1", 1, 1, 1001},
                        {"decode b=64", 64, 1, 1001},
                        {"decode b=256", 256, 1, 1001},
                        {"prefill 64x128", 64, 128, 0}};
  for (const Case& c : cases) {
    const Rows r(c.seqs, c.per_seq, c.start);
    const auto rows = static_cast<int64_t>(r.seq.size());
    const auto seq_d = upload(r.seq, st, "seq");
    const auto pos_d = upload(r.pos, st, "pos");
    const auto end_d = upload(r.end, st, "seq_end");
    const double in_row = kKvDim * 4.0;
    const auto n = static_cast<double>(rows);
    const auto n_seqs = static_cast<double>(c.seqs);

    Table swa(c.seqs, kWindow, kSwaEntryBytes, st);
    SwaWriteParams sw;
    sw.x = x_d.data();
    sw.norm_weight = norm_d.as<float>();
    sw.freqs = freqs_d.as<float>();
    sw.seq = seq_d.as<int32_t>();
    sw.positions = pos_d.as<int64_t>();
    sw.seq_end = end_d.as<int64_t>();
    sw.table = swa.t;
    sw.rows = rows;
    const double swa_us = time_us(stream, 20, [&](cudaStream_t s) { swa_write(sw, s); });
    std::printf("%s\n", c.name);
    report("  swa_write", rows, swa_us, n * (in_row + kSwaEntryBytes), copy);

    const int64_t comp_entries = c.start + c.per_seq;
    Table comp(c.seqs, comp_entries, kCompEntryBytes, st);
    CompressRatio1Params c1;
    c1.x = x_d.data();
    c1.norm_weight = norm_d.as<float>();
    c1.freqs = freqs_d.as<float>();
    c1.seq = seq_d.as<int32_t>();
    c1.positions = pos_d.as<int64_t>();
    c1.latent = latent_d.as<float>();
    c1.table = comp.t;
    c1.rows = rows;
    const double c1_us = time_us(stream, 20, [&](cudaStream_t s) { compress_ratio1(c1, s); });
    report("  compress_ratio1", rows, c1_us, n * (2 * in_row + kCompEntryBytes), copy);

    // Ratio 2: decode rows sit at odd positions (every row completes a group with the carried
    // slot); prefill chunks start at 0. The state rows are rewritten identically every launch.
    const Rows r2(c.seqs, c.per_seq, c.per_seq == 1 ? c.start : 0);
    std::vector<int32_t> state_rows(static_cast<size_t>(c.seqs));
    std::iota(state_rows.begin(), state_rows.end(), 0);
    const CompressorPlan plan = plan_compressor(2, r2.seq, r2.pos, state_rows);
    const auto work_d = upload(plan.work, st, "work");
    DeviceBuffer state_d(static_cast<size_t>(c.seqs * kRatio2StateFloats) * 4, "state");
    state_d.fill_async(0, st);
    CompressRatio2Params c2;
    c2.kv = x_d.data();
    c2.score = s_d.data();
    c2.norm_weight = norm_d.as<float>();
    c2.freqs = freqs_d.as<float>();
    c2.work = work_d.as<Ratio2Work>();
    c2.state = state_d.as<float>();
    c2.latent = latent_d.as<float>();
    c2.table = comp.t;
    c2.works = static_cast<int64_t>(plan.work.size());
    const double c2_us = time_us(stream, 20, [&](cudaStream_t s) { compress_ratio2(c2, s); });
    const double g2 = static_cast<double>(plan.groups());
    report("  compress_ratio2", rows, c2_us,
           n * 2 * in_row + g2 * (in_row + kCompEntryBytes) + n_seqs * 4 * in_row, copy);

    const auto gseq_d = upload(plan.group_seq, st, "group seq");
    const auto gidx_d = upload(plan.group_index, st, "group index");
    Table idx(c.seqs, comp_entries, kIndexKeyBytes, st);
    IndexKeyParams k;
    k.latent = latent_d.as<float>();
    k.wk = wk_d.as<uint16_t>();
    k.norm_weight = norm_d.as<float>();
    k.freqs = freqs_d.as<float>();
    k.seq = gseq_d.as<int32_t>();
    k.group = gidx_d.as<int64_t>();
    k.table = idx.t;
    k.groups = plan.groups();
    k.ratio = 2;
    const double k_us = time_us(stream, 20, [&](cudaStream_t s) { index_key_write(k, s); });
    report("  index_key_write", plan.groups(), k_us,
           g2 * (in_row + kIndexKeyBytes) + kIndexDim * kKvDim * 2.0, copy);
    const double flops = g2 * kIndexDim * kKvDim * 2.0;
    std::printf("  %-20s %.2f fp32 TFLOP/s in the wk matvec\n", "", flops / (k_us * 1e-6) / 1e12);
  }
}

}  // namespace
}  // namespace di

int main() {
  if (di::cuda_device_count() == 0) {
    std::fprintf(stderr, "kv_write_bench: no CUDA device\n");
    return 1;
  }
  di::Stream stream;
  const double copy = di::copy_gbs(stream);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy);
  di::bench_all(stream, copy);
  return 0;
}
