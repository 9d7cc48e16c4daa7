// Host-side regrouping and re-encoding of the FP4 expert codes into the GPU's tiled order
// (kernels/params/moe.h).

#include <algorithm>
#include <array>
#include <cstring>

#include "common/check.h"
#include "kernels/cuda/moe/moe_expert.cuh"

namespace di {

void pack_fp4_expert_codes(const uint8_t* src, int64_t n, int64_t k, uint8_t* dst) {
  DI_CHECK(n > 0 && k > 0 && k % 32 == 0,
           "pack_fp4_expert_codes: an FP4 expert matrix needs columns % 32 == 0 (got [{}, {}])", n,
           k);
  const int64_t row_bytes = k / 2, tiles = fp4_expert_k_tiles(k);
  std::memset(dst, 0, static_cast<size_t>(fp4_expert_codes_bytes(n, k)));
  std::array<uint8_t, 256> enc{};
  for (int c = 0; c < 256; ++c)
    enc[static_cast<size_t>(c)] = fp4_expert_encode_byte(static_cast<uint8_t>(c));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t b0 = t * kFp4TileRowBytes;
      const int64_t len = std::min(kFp4TileRowBytes, row_bytes - b0);
      uint8_t* out = dst + fp4_expert_code_offset(r, b0, k);
      const uint8_t* in = src + r * row_bytes + b0;
      for (int64_t i = 0; i < len; ++i)
        out[i] = enc[in[i]];
    }
}

}  // namespace di
