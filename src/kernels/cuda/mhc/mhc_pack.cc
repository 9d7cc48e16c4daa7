// Host-side helpers of the mHC kernels: the split plan, the workspace size and the fn packing.

#include <cstddef>
#include <cstdint>

#include "common/check.h"
#include "kernels/cuda/mhc/mhc.cuh"

namespace di {
namespace {

constexpr int64_t kChunk = 64;                // d per pipeline stage of the pre kernel (mhc_pre.cu)
constexpr int kMaxSplits = 16;                // splits of the D axis; see mhc_pre_splits
constexpr int64_t kPartials = kMhcMixes + 1;  // 24 dot products + the sum of squares

}  // namespace

int mhc_pre_splits(int64_t dim) {
  DI_CHECK(dim > 0 && dim % kChunk == 0, "mhc: dim {} must be a positive multiple of {}", dim,
           kChunk);
  const int64_t chunks = dim / kChunk;
  int splits = 1;
  for (int s = 1; s <= kMaxSplits; ++s) {
    if (chunks % s == 0) splits = s;
  }
  return splits;
}

size_t mhc_pre_workspace_bytes(int64_t tokens, int64_t dim) {
  DI_CHECK(tokens >= 0, "mhc: negative token count {}", tokens);
  return static_cast<size_t>(mhc_pre_splits(dim)) * static_cast<size_t>(tokens) *
         static_cast<size_t>(kPartials) * sizeof(float);
}

void mhc_pack_fn(const float* fn, int64_t dim, float* packed) {
  DI_CHECK(fn != nullptr && packed != nullptr, "mhc_pack_fn: null pointer");
  DI_CHECK(dim > 0 && dim % 16 == 0, "mhc_pack_fn: dim {} must be a multiple of 16", dim);
  const int64_t width = kMhcStreams * dim;
  // Lane l = 4g + q of an m16n8k16 B fragment holds, for n-tile n (mixes 8n..8n+7) and register
  // h, the mix 8n + g at k = 2q + 8h + e (e = 0 low half, 1 high half). Each lane's 12 values
  // (n, h, e) are stored as 3 float4 chunks, chunk-major so that a warp's load is contiguous.
  for (int64_t kb = 0; kb < width / 16; ++kb) {
    float* blk = packed + kb * 384;
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, q = lane & 3;
      for (int n = 0; n < 3; ++n) {
        for (int h = 0; h < 2; ++h) {
          for (int e = 0; e < 2; ++e) {
            const int idx = (n * 2 + h) * 2 + e;
            const int64_t k = kb * 16 + 2 * q + 8 * h + e;
            blk[(idx / 4) * 128 + lane * 4 + idx % 4] = fn[(n * 8 + g) * width + k];
          }
        }
      }
    }
  }
}

}  // namespace di
