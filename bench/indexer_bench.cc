// Lightning indexer on the GPU (issue 7): scoring (decode: 64K keys, batch 1 and 8; prefill: 2048
// query rows x 16K keys) against the device-to-device copy bandwidth measured in the same run,
// top-k over 64K scores against the time to read those scores once, the candidate pool.
// Timing: CUDA graphs of repeated launches; every launch reads a different replica of its inputs
// (together > 4x the L2), so the numbers are HBM numbers, not L2 numbers.
//
// Usage: indexer_bench [score [ROWS [SPREAD]] | topk ROWS N [CTAS_PER_ROW [K]]]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "common/check.h"
#include "kernels/cuda/indexer/indexer.cuh"

namespace di {
namespace {

using bench::upload;

constexpr size_t kReplicaBytes = size_t{256} << 20;  // inputs cycled per launch (> 4x L2)

using bench::copy_gbs;

double time_us(Stream& stream, int reps, const std::function<void(int, cudaStream_t)>& work) {
  return bench::graph_time_us(stream, reps, work);
}

// A paged key pool of `seqs` sequences x `len` keys (64 entries per page, shuffled page ids),
// random e2m1 codes with scale bytes 127 + a uniform offset in [-spread, spread] per block.
// spread 0 or 1: every key's blocks span <= 3 octaves (the kernels' chained-integer path);
// larger spreads send most keys and rows to the per-block path.
struct KeyPool {
  static constexpr int kEntriesPerPage = 64;
  static constexpr int64_t kPageBytes = kEntriesPerPage * kIndexKeyBytes;
  DeviceBuffer pool, pages;
  int32_t pages_stride = 0;

  KeyPool(int64_t seqs, int64_t len, cudaStream_t stream, int spread) {
    pages_stride = static_cast<int32_t>((len + kEntriesPerPage - 1) / kEntriesPerPage);
    const int64_t n_pages = seqs * pages_stride;
    std::vector<int32_t> ids(static_cast<size_t>(n_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937_64 rng(1);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<uint8_t> host(static_cast<size_t>(n_pages * kPageBytes));
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = static_cast<uint8_t>(rng());
    std::uniform_int_distribution<int> offset(-spread, spread);
    for (int64_t e = 0; e < n_pages * kEntriesPerPage; ++e) {
      for (int b = 0; b < 4; ++b)
        host[static_cast<size_t>(e * kIndexKeyBytes + 64 + b)] =
            static_cast<uint8_t>(127 + offset(rng));
    }
    pool = DeviceBuffer(host.size(), "bench key pool");
    pool.copy_from_host_async(host.data(), host.size(), stream);
    pages = DeviceBuffer(ids.size() * 4, "bench page table");
    pages.copy_from_host_async(ids.data(), ids.size() * 4, stream);
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  PagedTable table() {
    PagedTable t;
    t.pool = pool.as<uint8_t>();
    t.page_bytes = kPageBytes;
    t.pages = pages.as<int32_t>();
    t.pages_stride = pages_stride;
    t.entries_per_page = kEntriesPerPage;
    t.entry_bytes = kIndexKeyBytes;
    return t;
  }
};

// Scoring of `rows` query rows against `len` keys. Decode: row r reads its own sequence; prefill:
// all rows read one sequence with causal visibility (the last row sees all keys). Each launch uses
// another replica (sequences and query rows). Scale bytes of keys and queries: KeyPool's spread.
void bench_score(Stream& stream, double copy, const char* name, int64_t rows, int64_t len,
                 bool prefill, int spread = 0) {
  const int64_t seqs_per_launch = prefill ? 1 : rows;
  const int64_t key_bytes = seqs_per_launch * len * kIndexKeyBytes;
  const int64_t replicas =
      std::max<int64_t>(1, static_cast<int64_t>(kReplicaBytes) / std::max<int64_t>(key_bytes, 1));
  KeyPool pool(replicas * seqs_per_launch, len, stream.get(), spread);
  std::vector<uint8_t> q(static_cast<size_t>(rows * kIndexQueryBytes));
  std::mt19937_64 rng(2);
  std::uniform_int_distribution<int> offset(-spread, spread);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = (i % kIndexKeyBytes) >= 64 ? static_cast<uint8_t>(127 + offset(rng))
                                      : static_cast<uint8_t>(rng());
  }
  std::vector<float> w(static_cast<size_t>(rows * kIndexHeads), 0.01f);
  std::vector<int32_t> seq(static_cast<size_t>(replicas * rows)), vis(static_cast<size_t>(rows));
  for (int64_t c = 0; c < replicas; ++c) {
    for (int64_t r = 0; r < rows; ++r)
      seq[static_cast<size_t>(c * rows + r)] = static_cast<int32_t>(prefill ? c : c * rows + r);
  }
  for (int64_t r = 0; r < rows; ++r)
    vis[static_cast<size_t>(r)] = static_cast<int32_t>(prefill ? len - (rows - 1 - r) : len);
  auto q_dev = upload(q, stream.get(), "q");
  auto w_dev = upload(w, stream.get(), "weights");
  auto seq_dev = upload(seq, stream.get(), "row_seq");
  auto vis_dev = upload(vis, stream.get(), "row_visible");
  DeviceBuffer out(static_cast<size_t>(rows * len) * 4, "scores");
  IndexerScoreParams p;
  p.q = q_dev.as<uint8_t>();
  p.weights = w_dev.as<float>();
  p.keys = pool.table();
  p.row_visible = vis_dev.as<int32_t>();
  p.rows = rows;
  p.rows_share_keys = prefill;
  p.n_cols = len;
  p.score_stride = len;
  p.scores = out.as<float>();
  const double us = time_us(stream, 20, [&](int i, cudaStream_t s) {
    IndexerScoreParams pi = p;
    pi.row_seq = seq_dev.as<int32_t>() + (i % replicas) * rows;
    indexer_score(pi, s);
  });
  const double key_gbs = static_cast<double>(key_bytes) / (us * 1e-6) / 1e9;
  const double all_bytes = static_cast<double>(key_bytes) + static_cast<double>(rows * len) * 4.0 +
                           static_cast<double>(rows) * kIndexQueryBytes;
  const double all_gbs = all_bytes / (us * 1e-6) / 1e9;
  double pairs = 0;
  for (int64_t r = 0; r < rows; ++r)
    pairs += vis[static_cast<size_t>(r)];
  const double tops = pairs * kIndexHeads * kIndexDim * 2.0 / (us * 1e-6) / 1e12;
  std::printf(
      "%-16s spread=%d rows=%-5lld keys=%-6lld %9.2f us | key bytes %7.2f MB %7.0f GB/s = %5.1f%% "
      "of copy | "
      "all bytes %7.0f GB/s = %5.1f%% | int8 %6.1f TOPS\n",
      name, spread, static_cast<long long>(rows), static_cast<long long>(len), us,
      static_cast<double>(key_bytes) / 1e6, key_gbs, 100.0 * key_gbs / copy, all_gbs,
      100.0 * all_gbs / copy, tops);
}

// Top-k (k = 512) of `rows` rows of 64K scores (|N(0,1)|, distinct replicas per launch), against
// reading those scores once at the copy bandwidth and against a device-to-device copy of them.
// wide: values spread over 2^-60 .. 2^60 (scores rarely share a radix bin) instead of |N(0,1)|.
void bench_topk(Stream& stream, double copy, int64_t rows, int64_t n, int k, bool wide = false,
                int ctas_per_row = 0) {
  const int64_t row_bytes = rows * n * 4;
  const int64_t replicas = std::max<int64_t>(1, static_cast<int64_t>(kReplicaBytes) / row_bytes);
  std::vector<float> s(static_cast<size_t>(replicas * rows * n));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-60.0f, 60.0f);
  for (auto& x : s)
    x = wide ? std::exp2(ud(rng)) : std::abs(nd(rng));
  auto s_dev = upload(s, stream.get(), "scores");
  DeviceBuffer out(static_cast<size_t>(rows * k) * 4, "top-k");
  DeviceBuffer copy_dst(static_cast<size_t>(row_bytes), "copy dst");
  IndexerTopkParams p;
  p.rows = rows;
  p.n = n;
  p.score_stride = n;
  p.k = k;
  p.out = out.as<int32_t>();
  p.out_stride = k;
  p.ctas_per_row = ctas_per_row;
  const double us = time_us(stream, 20, [&](int i, cudaStream_t st) {
    IndexerTopkParams pi = p;
    pi.scores = s_dev.as<float>() + (i % replicas) * rows * n;
    indexer_topk(pi, st);
  });
  const double copy_us = time_us(stream, 20, [&](int i, cudaStream_t st) {
    DI_CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), s_dev.as<float>() + (i % replicas) * rows * n,
                                  static_cast<size_t>(row_bytes), cudaMemcpyDeviceToDevice, st));
  });
  const double read_us = static_cast<double>(row_bytes) / (copy * 1e9) * 1e6;
  std::printf(
      "topk k=%-4d %-5s rows=%-5lld n=%-6lld ctas/row=%-2d %9.2f us | read once at copy rate %7.2f "
      "us: %5.2fx | D2D copy of the scores %7.2f us: %5.2fx\n",
      k, wide ? "wide" : "|N|", static_cast<long long>(rows), static_cast<long long>(n),
      ctas_per_row, us, read_us, us / read_us, copy_us, us / copy_us);
}

void bench_candidates(Stream& stream, int64_t rows, int64_t n) {
  std::vector<float> s(static_cast<size_t>(rows * n));
  std::mt19937_64 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : s)
    x = std::abs(nd(rng));
  std::vector<int32_t> vis(static_cast<size_t>(rows), static_cast<int32_t>(n));
  auto s_dev = upload(s, stream.get(), "scores");
  auto v_dev = upload(vis, stream.get(), "visible");
  DeviceBuffer ws(indexer_candidates_workspace_bytes(rows, n, 8, 2048), "workspace");
  DeviceBuffer mask(static_cast<size_t>(rows * n), "mask");
  IndexerCandidateParams p;
  p.scores = s_dev.as<float>();
  p.row_visible = v_dev.as<int32_t>();
  p.rows = rows;
  p.n = n;
  p.score_stride = n;
  p.workspace = ws.data();
  p.mask = mask.as<uint8_t>();
  p.mask_stride = n;
  const double us = time_us(stream, 20, [&](int, cudaStream_t st) { indexer_candidates(p, st); });
  std::printf(
      "candidates       rows=%-5lld n=%-6lld %9.2f us (block max + top-2048 of %lld "
      "blocks + mask)\n",
      static_cast<long long>(rows), static_cast<long long>(n), us, static_cast<long long>(n / 8));
}

// indexer_bench: every case; indexer_bench topk ROWS N [CTAS_PER_ROW [K]]: that top-k case only
// (IndexerTopkParams::ctas_per_row, default 0 = chosen; -1 = one CTA reading the global row; K
// default 512); indexer_bench score [ROWS [SPREAD]]: the scoring cases only (decode at 1, 8, 64,
// 132 and 256 rows, 64 rows again with scale spreads 1 and 2, prefill), or the decode case of
// ROWS rows alone (scale spread SPREAD, default 0: see KeyPool).
int run(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "indexer_bench: no CUDA device\n");
    return 1;
  }
  const DeviceInfo info = device_info(0);
  Stream stream;
  std::printf("device: %s, %d SMs\n", info.name.c_str(), info.sm_count);
  const double copy = copy_gbs(stream);
  std::printf("ceiling: D2D copy %.0f GB/s (read + write of 2 GiB)\n", copy);
  if (argc >= 4 && std::string(argv[1]) == "topk") {
    bench_topk(stream, copy, std::stoll(argv[2]), std::stoll(argv[3]),
               argc > 5 ? std::stoi(argv[5]) : 512, false, argc > 4 ? std::stoi(argv[4]) : 0);
    return 0;
  }
  const bool score_only = argc >= 2 && std::string(argv[1]) == "score";
  if (score_only && argc >= 3) {  // indexer_bench score ROWS [SPREAD]: that case alone (profiles)
    bench_score(stream, copy, "score decode", std::stoll(argv[2]), 65536, false,
                argc >= 4 ? std::stoi(argv[3]) : 0);
    return 0;
  }
  for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{64}}) {
    bench_score(stream, copy, "score decode", rows, 65536, false);
  }
  if (score_only) {
    bench_score(stream, copy, "score decode", 132, 65536, false);
    bench_score(stream, copy, "score decode", 256, 65536, false);
    // Block exponents that differ: spread 1 keeps every row and key on the chained-integer path
    // (with alignment shifts), spread 2 sends nearly every row to the per-block path.
    bench_score(stream, copy, "score decode", 64, 65536, false, 1);
    bench_score(stream, copy, "score decode", 64, 65536, false, 2);
  }
  bench_score(stream, copy, "score prefill", 2048, 16384, true);
  if (score_only) return 0;
  for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{132}, int64_t{1024}})
    bench_topk(stream, copy, rows, 65536, 512);
  bench_topk(stream, copy, 132, 262144, 512);
  bench_topk(stream, copy, 1, 65536, 512, true);
  bench_topk(stream, copy, 132, 65536, 512, true);
  bench_candidates(stream, 1, 65536);
  bench_candidates(stream, 8, 65536);
  return 0;
}

}  // namespace
}  // namespace di

int main(int argc, char** argv) {
  try {
    return di::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "indexer_bench: %s\n", e.what());
    return 1;
  }
}
