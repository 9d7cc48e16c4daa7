#pragma once

// Routing set-up shared by the MoE GPU tests: random distinct expert ids per row, and the
// expert-contiguous pair order + tile list built on the GPU (moe_permute, moe_expert_tiles) with
// host copies of the offsets and permutation.

#include <algorithm>
#include <random>
#include <vector>

#include "../dense_ops/dense_ops_test_util.h"
#include "backend/cuda/device_buffer.h"
#include "kernels/cuda/moe/moe_expert.cuh"
#include "kernels/cuda/moe/moe_route.cuh"

namespace di::moe_test {

using dense_test::download;
using dense_test::poisoned;
using dense_test::upload;

struct Routing {
  int64_t rows = 0, pairs = 0, tile_count = 0;
  int32_t experts = 0, topk = 0, tile_tokens = kMoeTileTokens;
  std::vector<int32_t> ids, off, idx, pos;
  DeviceBuffer d_ids, d_off, d_idx, d_pos, d_tiles;
};

inline Routing route(const std::vector<int32_t>& ids, int64_t rows, int32_t experts, int32_t topk,
                     cudaStream_t st, int32_t tile_tokens = kMoeTileTokens) {
  Routing r;
  r.tile_tokens = tile_tokens;
  r.rows = rows;
  r.pairs = rows * topk;
  r.experts = experts;
  r.topk = topk;
  r.ids = ids;
  r.d_ids = upload(ids, st, "ids");
  r.d_off = poisoned<int32_t>(static_cast<size_t>(experts + 1), st);
  r.d_idx = poisoned<int32_t>(static_cast<size_t>(r.pairs), st);
  r.d_pos = poisoned<int32_t>(static_cast<size_t>(r.pairs), st);
  DeviceBuffer ws(std::max<size_t>(moe_permute_workspace_bytes(rows, topk, experts), 256), "ws");
  MoePermuteParams pp;
  pp.ids = r.d_ids.as<int32_t>();
  pp.rows = rows;
  pp.topk = topk;
  pp.experts = experts;
  pp.offsets = r.d_off.as<int32_t>();
  pp.pair_index = r.d_idx.as<int32_t>();
  pp.pair_pos = r.d_pos.as<int32_t>();
  pp.workspace = ws.data();
  pp.workspace_bytes = ws.size();
  moe_permute(pp, st);
  r.tile_count = moe_expert_tile_bound(experts, r.pairs, tile_tokens);
  r.d_tiles = poisoned<MoeExpertTile>(static_cast<size_t>(r.tile_count), st);
  MoeExpertTilesParams tp;
  tp.offsets = r.d_off.as<int32_t>();
  tp.experts = experts;
  tp.pairs = r.pairs;
  tp.tiles = r.d_tiles.as<MoeExpertTile>();
  tp.tile_tokens = tile_tokens;
  moe_expert_tiles(tp, st);
  r.off = download<int32_t>(r.d_off, static_cast<size_t>(experts + 1), st);
  r.idx = download<int32_t>(r.d_idx, static_cast<size_t>(r.pairs), st);
  r.pos = download<int32_t>(r.d_pos, static_cast<size_t>(r.pairs), st);
  return r;
}

// Distinct random experts per row; rows < hot_rows all take expert `hot` in slot 0.
inline std::vector<int32_t> random_ids(int64_t rows, int32_t experts, int32_t topk, uint64_t seed,
                                       int64_t hot_rows = 0, int32_t hot = 7) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(rows * topk));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> all(static_cast<size_t>(experts));
    for (int32_t e = 0; e < experts; ++e)
      all[static_cast<size_t>(e)] = e;
    std::shuffle(all.begin(), all.end(), rng);
    if (r < hot_rows) {
      std::iter_swap(all.begin(), std::find(all.begin(), all.end(), hot));
    }
    std::copy_n(all.begin(), topk, ids.begin() + r * topk);
  }
  return ids;
}

}  // namespace di::moe_test
