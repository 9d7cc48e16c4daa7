// Host-side helpers of the mHC kernels: the split plan, the workspace size and the fn packing.

#include <bit>
#include <cstddef>
#include <cstdint>

#include "common/check.h"
#include "kernels/cuda/mhc/mhc.cuh"

namespace di {
namespace {

constexpr int64_t kChunk = 64;                // d per pipeline stage of the pre kernel (mhc_pre.cu)
constexpr int64_t kPartials = kMhcMixes + 1;  // 24 dot products + the sum of squares

// bf16 round-to-nearest-even of a finite float (the device's __float2bfloat16_rn).
uint16_t bf16_rn(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float bf16_value(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// f = p0 + p1 + p2 with bf16 pieces; the two fp32 subtractions are exact.
struct Bf16Pieces {
  uint16_t p[3];
};

Bf16Pieces bf16_pieces(float f) {
  Bf16Pieces r{};
  r.p[0] = bf16_rn(f);
  const float r1 = f - bf16_value(r.p[0]);
  r.p[1] = bf16_rn(r1);
  r.p[2] = bf16_rn(r1 - bf16_value(r.p[1]));
  return r;
}

}  // namespace

int mhc_pre_splits(int64_t dim) {
  DI_CHECK(dim > 0 && dim % kChunk == 0, "mhc: dim {} must be a positive multiple of {}", dim,
           kChunk);
  const int64_t chunks = dim / kChunk;
  int splits = 1;
  for (int s = 1; s <= kMhcPreMaxSplits; ++s) {
    if (chunks % s == 0) splits = s;
  }
  return splits;
}

size_t mhc_pre_workspace_bytes(int64_t tokens, int64_t dim) {
  DI_CHECK(tokens >= 0, "mhc: negative token count {}", tokens);
  return static_cast<size_t>(mhc_pre_splits(dim)) * static_cast<size_t>(tokens) *
         static_cast<size_t>(kPartials) * sizeof(float);
}

void mhc_pack_fn(const float* fn, int64_t dim, uint32_t* packed) {
  DI_CHECK(fn != nullptr && packed != nullptr, "mhc_pack_fn: null pointer");
  DI_CHECK(dim > 0 && dim % 16 == 0, "mhc_pack_fn: dim {} must be a multiple of 16", dim);
  const int64_t width = kMhcStreams * dim;
  for (int64_t kb = 0; kb < width / 16; ++kb) {
    uint32_t* blk = packed + kb * 576;
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, q = lane & 3;
      for (int n = 0; n < 3; ++n) {
        for (int h = 0; h < 2; ++h) {
          const int64_t k = kb * 16 + 2 * q + 8 * h;
          const int64_t row = static_cast<int64_t>(n * 8 + g) * width;
          const Bf16Pieces lo = bf16_pieces(fn[row + k]);
          const Bf16Pieces hi = bf16_pieces(fn[row + k + 1]);
          for (int p = 0; p < 3; ++p) {
            const int w = 6 * p + 2 * n + h;  // this lane's word
            const uint32_t word = static_cast<uint32_t>(lo.p[p]) | (uint32_t{hi.p[p]} << 16);
            if (w < 16) {
              blk[(w / 4) * 128 + lane * 4 + w % 4] = word;
            } else {
              blk[512 + lane * 2 + (w - 16)] = word;
            }
          }
        }
      }
    }
  }
}

}  // namespace di
