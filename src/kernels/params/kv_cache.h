#pragma once

// The quantised KV cache of DeepSeek-V4.1 as the GPU kernels see it (delta spec §3.1): entry
// formats and the paged addressing of issue 5's manager (kv_cache/state_layout.h). Plain data and
// host/device inline helpers; no CUDA types, so model code fills these from .cc files.
//
// Entry formats (bytes of one entry, in order):
//   SWA ring entry   528 B: 512 e4m3fn codes, then 16 UE8M0 scale bytes (one per 32 values);
//                           value[d] = e4m3(code[d]) * 2^(scale[d / 32] - 127).
//   compressed entry 288 B: 256 bytes of packed e2m1 pairs (value 2i in the low nibble of byte i,
//                           2i + 1 in the high nibble), then 32 e4m3fn scale bytes (one per 16);
//                           value[d] = e2m1(nibble[d]) * e4m3(scale[d / 16]).
//   index key         68 B: 64 bytes of packed e2m1 pairs (as above), then 4 UE8M0 bytes (one per
//                           32); value[d] = e2m1(nibble[d]) * 2^(scale[d / 32] - 127).
// The CPU packers/unpackers are kernels/cpu/kv_pack.h; the unpacked values are bitwise the
// reference's fake-quantised values (cpu::act_quant_e4m3 / fp4_quant_e4m3 / fp4_quant_ue8m0).

#include <cstdint>

#include "common/host_device.h"

namespace di {

inline constexpr int kKvDim = 512;  // K = V latent width (head_dim)
inline constexpr int kSwaScaleBlock = 32;
inline constexpr int kSwaEntryBytes = kKvDim + kKvDim / kSwaScaleBlock;  // 528
inline constexpr int kCompScaleBlock = 16;
inline constexpr int kCompEntryBytes = kKvDim / 2 + kKvDim / kCompScaleBlock;  // 288
inline constexpr int kIndexDim = 128;
inline constexpr int kIndexScaleBlock = 32;
inline constexpr int kIndexKeyBytes = kIndexDim / 2 + kIndexDim / kIndexScaleBlock;  // 68

// Entry bytes of the same three formats at another width `dim` (the small test models: latent 128,
// index keys 64), same layouts as above: SWA dim codes + dim / 32 UE8M0 bytes; compressed dim / 2
// packed e2m1 + dim / 16 e4m3 scales; index key dim / 2 packed e2m1 + dim / 32 UE8M0 bytes.
DI_HOST_DEVICE constexpr int swa_entry_bytes(int dim) {
  return dim + dim / kSwaScaleBlock;
}
DI_HOST_DEVICE constexpr int comp_entry_bytes(int dim) {
  return dim / 2 + dim / kCompScaleBlock;
}
DI_HOST_DEVICE constexpr int index_key_bytes(int dim) {
  return dim / 2 + dim / kIndexScaleBlock;
}
static_assert(swa_entry_bytes(kKvDim) == kSwaEntryBytes &&
              comp_entry_bytes(kKvDim) == kCompEntryBytes &&
              index_key_bytes(kIndexDim) == kIndexKeyBytes);

// One paged table (one StateKind of one owner) for a batch of sequences. Entry e of batch row b
// lives at
//   pool + pages[b * pages_stride + e / entries_per_page] * page_bytes
//        + (e % entries_per_page) * entry_bytes
// (entries never straddle pages). The SWA table of a sequence holds the rings of all blocks:
// block r's slot for position p is entry r * window + p % window.
struct PagedTable {
  uint8_t* pool = nullptr;         // device base of the page pool
  int64_t page_bytes = 0;          // bytes per page
  const int32_t* pages = nullptr;  // [batch, pages_stride] page ids (device)
  int32_t pages_stride = 0;        // page ids per batch row
  int32_t entries_per_page = 0;    // floor(page_bytes / entry_bytes)
  int32_t entry_bytes = 0;         // kSwaEntryBytes, kCompEntryBytes or kIndexKeyBytes
};

DI_HOST_DEVICE inline uint8_t* paged_entry(const PagedTable& t, int64_t row, int64_t e) {
  const int32_t page = t.pages[row * t.pages_stride + e / t.entries_per_page];
  return t.pool + static_cast<int64_t>(page) * t.page_bytes +
         (e % t.entries_per_page) * static_cast<int64_t>(t.entry_bytes);
}

}  // namespace di
