#pragma once

// CPU packers and unpackers of the quantised KV cache entries (formats: kernels/params/kv_cache.h).
// pack_* quantise fp32 values exactly as the reference's fake-quant sites do (kernels/cpu/quant.h)
// and store codes + scales; unpack_* return the fake-quantised values bit for bit, so
// unpack(pack(x)) == the in-place simulation of x. Used by the GPU parity tests (building caches
// and reading back what kernels wrote) and by the CPU-side cache writer.
//
// The width comes from the value span (x.size() / out.size()): 512 / 128 in V4.1, other widths in
// the small test models; the entry span must have swa_entry_bytes / comp_entry_bytes /
// index_key_bytes of it bytes (kernels/params/kv_cache.h), otherwise di::Error.

#include <cstdint>
#include <span>

namespace di::cpu {

// SWA ring entry: act_quant e4m3 with a UE8M0 scale per 32 over all values (a multiple of 32).
void pack_swa_entry(std::span<const float> x, std::span<uint8_t> out);
void unpack_swa_entry(std::span<const uint8_t> entry, std::span<float> out);

// Compressed KV entry: FP4 e2m1 with an e4m3 scale per 16 over all values (a multiple of 16).
void pack_comp_entry(std::span<const float> x, std::span<uint8_t> out);
void unpack_comp_entry(std::span<const uint8_t> entry, std::span<float> out);

// Index key (and the indexer query's per-head rows): FP4 e2m1 with a UE8M0 scale per 32 over all
// values (a multiple of 32).
void pack_index_key(std::span<const float> x, std::span<uint8_t> out);
void unpack_index_key(std::span<const uint8_t> entry, std::span<float> out);

}  // namespace di::cpu
