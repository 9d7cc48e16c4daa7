// Routed-expert FFN on the GPU at V4.1-Flash size (issue 8): 384 experts of FP4 w1/w3 [2304,
// 5120] and w2 [5120, 2304] with 1 x 32 UE8M0 scales (17.7 MB per expert, 6.8 GB in all, every
// expert its own memory), top-6 routing of decode batches. Each line gives the per-launch time
// (CUDA graph of 16 launches, median of 5 replays) of the w1|w3 grouped GEMM, the w2 grouped GEMM
// and the whole routed-expert chain (tile list, activation interleave, w1|w3, SwiGLU + act_quant,
// w2), the FP4 weight bytes the step must stream (codes + scales of the distinct experts its
// tokens select) and that traffic per second: the "effective" FP4 streaming rate of issue 8
// (target >= 2.5 TB/s at batch 1-16), also as a fraction of the device-to-device copy bandwidth
// measured in the same run. The last two columns time the experts as the forward runs them at
// decode, where the fused routing + permutation writes the tiles and the FFN norm the
// interleaved activations: w1|w3, SwiGLU + act_quant, w2.
// Consecutive launches use 16 different random routings, so that no launch finds its experts
// in L2 (50 MB) from the previous one.
//
// Usage: moe_bench [batch]   (one of 1 2 4 8 16 32 64; default all)

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "kernels/cuda/moe/moe_expert.cuh"
#include "kernels/cuda/moe/moe_route.cuh"

namespace di {
namespace {

using bench::upload;

constexpr int32_t kE = 384;
constexpr int32_t kTopk = 6;
constexpr int64_t kDim = 5120;
constexpr int64_t kInter = 2304;
constexpr int kRoutings = 16;

// One routing of `rows` tokens: permutation, tiles, and the bytes of its distinct experts.
struct Routing {
  DeviceBuffer ids, off, idx, pos, ws, tiles;
  int64_t tile_count = 0;
  int32_t tile_tokens = kMoeTileTokens;
  int distinct = 0;
};

Routing make_routing(int64_t rows, uint64_t seed, Stream& stream, int32_t tile_tokens) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(rows * kTopk));
  std::set<int32_t> used;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> all(kE);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), kTopk, ids.begin() + r * kTopk);
    used.insert(all.begin(), all.begin() + kTopk);
  }
  const cudaStream_t st = stream.get();
  Routing rt;
  rt.distinct = static_cast<int>(used.size());
  rt.ids = upload(ids, st, "ids");
  rt.off = DeviceBuffer(sizeof(int32_t) * (kE + 1), "offsets");
  rt.idx = DeviceBuffer(sizeof(int32_t) * ids.size(), "pair index");
  rt.pos = DeviceBuffer(sizeof(int32_t) * ids.size(), "pair pos");
  rt.ws = DeviceBuffer(std::max<size_t>(moe_permute_workspace_bytes(rows, kTopk, kE), 256), "ws");
  MoePermuteParams pp;
  pp.ids = rt.ids.as<int32_t>();
  pp.rows = rows;
  pp.topk = kTopk;
  pp.experts = kE;
  pp.offsets = rt.off.as<int32_t>();
  pp.pair_index = rt.idx.as<int32_t>();
  pp.pair_pos = rt.pos.as<int32_t>();
  pp.workspace = rt.ws.data();
  pp.workspace_bytes = rt.ws.size();
  moe_permute(pp, st);
  rt.tile_tokens = tile_tokens;
  rt.tile_count = moe_expert_tile_bound(kE, rows * kTopk, tile_tokens);
  rt.tiles = DeviceBuffer(sizeof(MoeExpertTile) * static_cast<size_t>(rt.tile_count), "tiles");
  MoeExpertTilesParams tp;
  tp.offsets = rt.off.as<int32_t>();
  tp.experts = kE;
  tp.pairs = rows * kTopk;
  tp.tiles = rt.tiles.as<MoeExpertTile>();
  tp.tile_tokens = tile_tokens;
  moe_expert_tiles(tp, st);
  DI_CUDA_CHECK(cudaStreamSynchronize(st));
  return rt;
}

int run(int64_t only_batch) {
  if (cuda_device_count() == 0) {
    std::printf("moe_bench: no CUDA device\n");
    return 0;
  }
  Stream stream;
  const cudaStream_t st = stream.get();
  const double copy = bench::copy_gbs(stream);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy);

  // All experts in their own memory; the byte values do not change the kernels' work (the tiled
  // codes of these shapes are exactly n * k / 2 bytes: n % 64 == 0, k % 128 == 0).
  const size_t up_codes = kInter * kDim / 2, up_scales = kInter * kDim / 32;
  const size_t down_codes = kDim * kInter / 2, down_scales = kDim * kInter / 32;
  const size_t expert_bytes = 2 * (up_codes + up_scales) + down_codes + down_scales;
  DeviceBuffer codes(kE * (2 * up_codes + down_codes), "expert codes");
  DeviceBuffer scales(kE * (2 * up_scales + down_scales), "expert scales");
  codes.fill_async(0x5A, st);
  scales.fill_async(120, st);
  std::vector<Fp4ExpertMatrix> up(2 * kE), down(kE);
  for (int e = 0; e < kE; ++e) {
    const size_t c0 = static_cast<size_t>(e) * (2 * up_codes + down_codes);
    const size_t s0 = static_cast<size_t>(e) * (2 * up_scales + down_scales);
    up[static_cast<size_t>(e)] = {codes.as<uint8_t>() + c0, scales.as<uint8_t>() + s0};
    up[static_cast<size_t>(kE + e)] = {codes.as<uint8_t>() + c0 + up_codes,
                                       scales.as<uint8_t>() + s0 + up_scales};
    down[static_cast<size_t>(e)] = {codes.as<uint8_t>() + c0 + 2 * up_codes,
                                    scales.as<uint8_t>() + s0 + 2 * up_scales};
  }
  const DeviceBuffer up_table = upload(up, st, "w1|w3 table");
  const DeviceBuffer down_table = upload(down, st, "w2 table");
  std::printf("expert FP4 bytes (w1 + w3 + w2, codes + scales): %.2f MB\n",
              static_cast<double>(expert_bytes) / 1e6);
  std::printf("%6s %8s %10s %10s %10s %10s %10s %8s %10s %10s\n", "batch", "experts", "MB",
              "w1|w3 us", "w2 us", "chain us", "TB/s", "of copy", "experts us", "TB/s");

  // Decode batches (the tile size moe_expert_tile_tokens picks), then prefill-sized steps with
  // both tile sizes (the FLOP rate against the FP8 tensor-core rate is the roofline there).
  struct Step {
    int64_t rows;
    int32_t tile_tokens;  // 0: moe_expert_tile_tokens's choice
  };
  for (const Step step : {Step{1, 0}, Step{2, 0}, Step{4, 0}, Step{8, 0}, Step{16, 0}, Step{32, 0},
                          Step{64, 0}, Step{512, kMoeTileTokens}, Step{512, kMoeTileTokensPrefill},
                          Step{4096, kMoeTileTokens}, Step{4096, kMoeTileTokensPrefill}}) {
    const int64_t rows = step.rows;
    if (only_batch > 0 && rows != only_batch) continue;
    const int64_t pairs = rows * kTopk;
    const int32_t tile_tokens =
        step.tile_tokens != 0 ? step.tile_tokens : moe_expert_tile_tokens(kE, pairs);
    std::vector<Routing> rts;
    double distinct = 0.0;
    for (int i = 0; i < kRoutings; ++i) {
      rts.push_back(make_routing(rows, 1000 * rows + i, stream, tile_tokens));
      distinct += rts.back().distinct;
    }
    distinct /= kRoutings;
    DeviceBuffer xq(static_cast<size_t>(rows * kDim), "xq"), xs(rows * kDim / 32, "xs");
    DeviceBuffer xq_nat(static_cast<size_t>(rows * kDim), "xq natural");
    DeviceBuffer gu(sizeof(float) * pairs * 2 * kInter, "gu");
    DeviceBuffer hq(static_cast<size_t>(pairs * kInter), "hq"), hs(pairs * kInter / 32, "hs");
    DeviceBuffer y(sizeof(float) * pairs * kDim, "y");
    DeviceBuffer wts(sizeof(float) * pairs, "route weights");
    xq.fill_async(0x38, st);
    xq_nat.fill_async(0x38, st);
    xs.fill_async(120, st);
    wts.fill_async(0, st);
    auto gemm = [&](const Routing& rt, bool first, cudaStream_t s) {
      MoeExpertGemmParams p;
      p.xq = first ? xq.as<uint8_t>() : hq.as<uint8_t>();
      p.xq_scale = first ? xs.as<uint8_t>() : hs.as<uint8_t>();
      p.pair_index = first ? rt.idx.as<int32_t>() : nullptr;
      p.topk = kTopk;
      p.tiles = rt.tiles.as<MoeExpertTile>();
      p.tile_count = rt.tile_count;
      p.tile_tokens = rt.tile_tokens;
      p.weights = first ? up_table.as<Fp4ExpertMatrix>() : down_table.as<Fp4ExpertMatrix>();
      p.experts = kE;
      p.mats = first ? 2 : 1;
      p.pairs = pairs;
      p.n = first ? kInter : kDim;
      p.k = first ? kDim : kInter;
      p.out = first ? gu.data() : y.data();
      p.tiles_early = !first;  // w2 comes after moe_swiglu_quant in the chains below
      moe_expert_gemm(p, s);
    };
    auto swiglu = [&](const Routing& rt, cudaStream_t s) {
      MoeSwigluQuantParams p;
      p.gu = gu.data();
      p.weights = wts.as<float>();
      p.pair_index = rt.idx.as<int32_t>();
      p.pairs = pairs;
      p.inter = kInter;
      p.limit = 10.0f;
      p.codes = hq.as<uint8_t>();
      p.scales = hs.as<uint8_t>();
      p.interleave = true;
      moe_swiglu_quant(p, s);
    };
    hq.fill_async(0x38, st);
    hs.fill_async(120, st);
    const double t_up = bench::graph_time_us(stream, kRoutings, [&](int i, cudaStream_t s) {
      gemm(rts[static_cast<size_t>(i)], true, s);
    });
    const double t_down = bench::graph_time_us(stream, kRoutings, [&](int i, cudaStream_t s) {
      gemm(rts[static_cast<size_t>(i)], false, s);
    });
    const double t_chain = bench::graph_time_us(stream, kRoutings, [&](int i, cudaStream_t s) {
      const Routing& rt = rts[static_cast<size_t>(i)];
      MoeExpertTilesParams tp;
      tp.offsets = rt.off.as<int32_t>();
      tp.experts = kE;
      tp.pairs = pairs;
      tp.tiles = const_cast<MoeExpertTile*>(rt.tiles.as<MoeExpertTile>());
      tp.tile_tokens = rt.tile_tokens;
      moe_expert_tiles(tp, s);
      MoeInterleaveParams ip;
      ip.src = xq_nat.as<uint8_t>();
      ip.dst = xq.as<uint8_t>();
      ip.rows = rows;
      ip.k = kDim;
      moe_interleave_act(ip, s);
      gemm(rt, true, s);
      swiglu(rt, s);
      gemm(rt, false, s);
    });
    // The forward's decode sequence once routed (the fused routing + permutation writes the
    // tiles, the FFN norm the interleaved activations): w1 | w3, SwiGLU / act_quant, w2.
    const double t_experts = bench::graph_time_us(stream, kRoutings, [&](int i, cudaStream_t s) {
      const Routing& rt = rts[static_cast<size_t>(i)];
      gemm(rt, true, s);
      swiglu(rt, s);
      gemm(rt, false, s);
    });
    const double bytes = distinct * static_cast<double>(expert_bytes);
    const double tbs = bytes / (t_chain * 1e-6) / 1e12;
    const double experts_tbs = bytes / (t_experts * 1e-6) / 1e12;
    std::printf("%6ld %8.1f %10.1f %10.1f %10.1f %10.1f %10.2f %7.1f%% %10.1f %10.2f\n",
                static_cast<long>(rows), distinct, bytes / 1e6, t_up, t_down, t_chain, tbs,
                100.0 * tbs * 1e3 / copy, t_experts, experts_tbs);
    const double up_tbs =
        distinct * 2 * static_cast<double>(up_codes + up_scales) / (t_up * 1e-6) / 1e12;
    const double down_tbs =
        distinct * static_cast<double>(down_codes + down_scales) / (t_down * 1e-6) / 1e12;
    std::printf("%6s   w1|w3 alone %.2f TB/s, w2 alone %.2f TB/s; tiles of %d pairs", "", up_tbs,
                down_tbs, tile_tokens);
    const double flops = 2.0 * static_cast<double>(pairs) * 3.0 * kInter * kDim;
    std::printf("; chain %.0f TFLOP/s\n", flops / (t_chain * 1e-6) / 1e12);
  }
  return 0;
}

}  // namespace
}  // namespace di

int main(int argc, char** argv) {
  try {
    return di::run(argc > 1 ? std::atoll(argv[1]) : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_bench: %s\n", e.what());
    return 1;
  }
}
