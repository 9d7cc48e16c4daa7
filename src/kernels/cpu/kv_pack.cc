#include "kernels/cpu/kv_pack.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/fp4.h"
#include "common/fp8.h"
#include "kernels/params/kv_cache.h"

namespace di::cpu {
namespace {

float block_amax(const float* x, int n) {
  float a = 0.0f;
  for (int i = 0; i < n; ++i)
    a = std::max(a, std::fabs(x[i]));
  return a;
}

// The entry width: the value count, which must be a positive multiple of `block` (at most 2^24)
// with an entry of entry_bytes(values) bytes.
int entry_dim(const char* what, size_t values, size_t bytes, int block, int (*entry_bytes)(int)) {
  const bool dim_ok =
      values > 0 && values <= (size_t{1} << 24) && values % static_cast<size_t>(block) == 0;
  const int dim = dim_ok ? static_cast<int>(values) : 0;
  DI_CHECK(dim_ok && bytes == static_cast<size_t>(entry_bytes(dim)),
           "{}: {} values / {} bytes (values: a positive multiple of {}; bytes: {} for them)", what,
           values, bytes, block, dim_ok ? entry_bytes(dim) : -1);
  return dim;
}

// FP4 e2m1 codes of x / s (clamped to +-6) packed in pairs, even element in the low nibble.
void pack_e2m1_block(const float* x, int n, float s, uint8_t* out) {
  for (int i = 0; i < n; i += 2) {
    const uint8_t lo = e2m1_from_float(std::clamp(x[i] / s, -6.0f, 6.0f));
    const uint8_t hi = e2m1_from_float(std::clamp(x[i + 1] / s, -6.0f, 6.0f));
    out[i / 2] = pack_e2m1(lo, hi);
  }
}

// The e2m1 payload + UE8M0 scales layout shared by the index key (and the indexer query rows).
void pack_fp4_ue8m0(std::span<const float> x, std::span<uint8_t> out, int dim, int block) {
  const float c = 1.0f / 6.0f;
  const float floor_amax = 6.0f * 0x1p-126f;
  uint8_t* scales = out.data() + dim / 2;
  for (int b = 0; b < dim / block; ++b) {
    const float* p = x.data() + b * block;
    const float a = std::max(block_amax(p, block), floor_amax);
    const uint8_t byte = e8m0_pow2ceil(a * c);
    scales[b] = byte;
    pack_e2m1_block(p, block, e8m0_to_float(byte), out.data() + b * block / 2);
  }
}

}  // namespace

void pack_swa_entry(std::span<const float> x, std::span<uint8_t> out) {
  const int dim =
      entry_dim("pack_swa_entry", x.size(), out.size(), kSwaScaleBlock, swa_entry_bytes);
  const float c = 1.0f / 448.0f;
  uint8_t* scales = out.data() + dim;
  for (int b = 0; b < dim / kSwaScaleBlock; ++b) {
    const float* p = x.data() + b * kSwaScaleBlock;
    const float a = std::max(block_amax(p, kSwaScaleBlock), 1e-4f);
    const uint8_t byte = e8m0_pow2ceil(a * c);
    const float s = e8m0_to_float(byte);
    scales[b] = byte;
    for (int i = 0; i < kSwaScaleBlock; ++i)
      out[static_cast<size_t>(b * kSwaScaleBlock + i)] =
          e4m3_from_float(std::clamp(p[i] / s, -448.0f, 448.0f));
  }
}

void unpack_swa_entry(std::span<const uint8_t> entry, std::span<float> out) {
  const int dim =
      entry_dim("unpack_swa_entry", out.size(), entry.size(), kSwaScaleBlock, swa_entry_bytes);
  for (int d = 0; d < dim; ++d)
    out[static_cast<size_t>(d)] =
        e4m3_to_float(entry[static_cast<size_t>(d)]) *
        e8m0_to_float(entry[static_cast<size_t>(dim + d / kSwaScaleBlock)]);
}

void pack_comp_entry(std::span<const float> x, std::span<uint8_t> out) {
  const int dim =
      entry_dim("pack_comp_entry", x.size(), out.size(), kCompScaleBlock, comp_entry_bytes);
  const float floor_amax = 6.0f * 0x1p-9f;
  uint8_t* scales = out.data() + dim / 2;
  for (int b = 0; b < dim / kCompScaleBlock; ++b) {
    const float* p = x.data() + b * kCompScaleBlock;
    const float a = std::max(block_amax(p, kCompScaleBlock), floor_amax);
    const uint8_t code = e4m3_from_float(a / 6.0f);
    scales[b] = code;
    pack_e2m1_block(p, kCompScaleBlock, e4m3_to_float(code), out.data() + b * kCompScaleBlock / 2);
  }
}

void unpack_comp_entry(std::span<const uint8_t> entry, std::span<float> out) {
  const int dim =
      entry_dim("unpack_comp_entry", out.size(), entry.size(), kCompScaleBlock, comp_entry_bytes);
  for (int d = 0; d < dim; ++d) {
    const uint8_t byte = entry[static_cast<size_t>(d / 2)];
    const uint8_t nib = (d % 2 == 0) ? e2m1_lo(byte) : e2m1_hi(byte);
    out[static_cast<size_t>(d)] =
        e2m1_to_float(nib) *
        e4m3_to_float(entry[static_cast<size_t>(dim / 2 + d / kCompScaleBlock)]);
  }
}

void pack_index_key(std::span<const float> x, std::span<uint8_t> out) {
  const int dim =
      entry_dim("pack_index_key", x.size(), out.size(), kIndexScaleBlock, index_key_bytes);
  pack_fp4_ue8m0(x, out, dim, kIndexScaleBlock);
}

void unpack_index_key(std::span<const uint8_t> entry, std::span<float> out) {
  const int dim =
      entry_dim("unpack_index_key", out.size(), entry.size(), kIndexScaleBlock, index_key_bytes);
  for (int d = 0; d < dim; ++d) {
    const uint8_t byte = entry[static_cast<size_t>(d / 2)];
    const uint8_t nib = (d % 2 == 0) ? e2m1_lo(byte) : e2m1_hi(byte);
    out[static_cast<size_t>(d)] =
        e2m1_to_float(nib) *
        e8m0_to_float(entry[static_cast<size_t>(dim / 2 + d / kIndexScaleBlock)]);
  }
}

}  // namespace di::cpu
