#pragma once

// Params of the GPU cache writers of DeepSeek-V4.1 attention (issue 7, item 3): the window KV write
// of every layer, the compressors of the kv-source owners (ratio 1 at layer 20, ratio 2 at layers
// 2/8/14) and the index-key projection of the owners. Raw pointers, sizes and the tensor contract
// of every argument; no CUDA types, so model code fills these from .cc files. The launchers live in
// kernels/cuda/kv_write/kv_write.cuh; they validate the Params (di::Error naming the op), never
// allocate, never synchronize. Entry formats and paged addressing: kernels/params/kv_cache.h.
//
// Exactness contract. The CPU reference is Model<float> (model/deepseek_v41/attention.cc) composed
// of cpu::rms_norm, cpu::RopeTable<float>::apply, cpu::linear and the fake-quant simulations of
// cpu/quant.h. The kernels reproduce its fp32 operation order exactly, so the stored bytes equal
// cpu::pack_* of the reference values bit for bit, except where a transcendental differs by one
// fp32 ulp (RoPE cos/sin and the ratio-2 softmax exp are evaluated in double and rounded once;
// glibc's cosf/sinf/expf misround a small fraction of arguments) and that ulp moves a value across
// a rounding boundary of the e4m3/e2m1 grid or a scale across a power of two/e4m3 step:
//   RMSNorm  ss = 0; ss = ss + x[i] * x[i] for i ascending (one thread, unfused fp32);
//            s = 1 / sqrt(ss / dim + eps); y[i] = w[i] * (x[i] * s)            (cpu::rms_norm)
//   RoPE     angle = fp32(pos) * freq[i]; c, s = fp32(cos/sin(double(angle)));
//            (a, b) -> (a*c - b*s, a*s + b*c), unfused                        (RopeTable::apply)
//   matvec   k[j] = 0; k[j] = k[j] + latent[c] * wk[j, c] for c ascending     (cpu::linear)
//   softmax  per channel: m = max(s0, s1); den = 0 + e^(s0-m) + e^(s1-m);
//            acc = 0 + kv0 * (e^(s0-m) / den) + kv1 * (e^(s1-m) / den)        (Model::compress)
//   quant    act_quant e4m3 / UE8M0-32, fp4 e2m1 / E4M3-16, fp4 e2m1 / UE8M0-32 exactly as
//            cpu/quant.h (scale arithmetic in fp32, element x / s correctly rounded, RNE codes).
// Activations in bf16 storage are widened exactly to fp32; nothing is rounded to bf16 afterwards
// (the reference computes these sites in fp32).
//
// Widths. The comments below give the production V4.1 widths (latent 512, RoPE 64, index keys 128),
// which run the tuned kernels. Other widths (the small test models: latent 128, index keys 64) set
// `dim` / `rope_dim` (/ `latent_dim`) and run a generic kernel per launcher (one CTA per row,
// block- strided loops) with the same arithmetic and so the same exactness contract. Generic
// widths: dim a positive multiple of 32 (the scale blocks), rope_dim even and in [2, dim],
// latent_dim a positive multiple of 4, rows held in shared memory (dim, latent_dim + dim <=
// kKvGenericMaxFloats). Entry bytes at width dim: swa_entry_bytes / comp_entry_bytes /
// index_key_bytes (kv_cache.h).

#include <cstdint>

#include "common/host_device.h"
#include "kernels/params/dense_ops.h"
#include "kernels/params/kv_cache.h"

namespace di {

inline constexpr int kKvRopeDim = 64;  // RoPE tail of the 512-wide latent and of the 128-wide key
inline constexpr int kKvGenericMaxFloats = 8192;  // shared-memory row floats of the generic kernels

// Window KV write of one layer (every backbone layer and DSpark stage): for each row r,
//   kv = RoPE(rms_norm(x[r], kv_norm), positions[r]) (RoPE on the last 64 of 512),
// act_quant e4m3 with a UE8M0 scale per 32 over all 512 values, stored as the 528-byte SWA entry
// ring_block * window + positions[r] % window of batch row seq[r] of `table` (the ring slot).
//
// Ring collisions: two rows of one sequence in one launch whose positions are equal mod `window`
// would race for one slot. With seq_end set, a row is written to the ring only when
//   positions[r] >= seq_end[seq[r]] - window
// (the newest `window` positions of that sequence in the batch: exactly the ring the CPU holds
// after the chunk); with seq_end == nullptr every row is written and the caller guarantees at most
// `window` consecutive positions per sequence per launch.
// chunk_entries (optional) receives the 528-byte entry of every row, [rows, 528] contiguous (the
// SparseAttnParams::chunk_kv of this chunk: the attention reads the chunk's own kv next to the
// ring). write_ring = false writes only chunk_entries.
//
// Order within a layer (the CPU builds the attention entries from the ring *before* writing the
// chunk into it): a prefill chunk of n >= 2 rows would overwrite ring slots its own queries still
// read (position p + 128 - k replaces p - k), so call swa_write(write_ring = false, chunk_entries)
// before the attention and swa_write(write_ring = true, chunk_entries = nullptr) after it (the
// recomputation gives the same bytes). A decode row only replaces position pos - 128, outside its
// window: one call with both before the attention is fine.
struct SwaWriteParams {
  const void* x = nullptr;             // [rows, 512] wkv output, fp32 or bf16 (precision)
  const float* norm_weight = nullptr;  // [512] kv_norm weight
  const float* freqs = nullptr;        // [32] RoPE frequencies of the layer (RopeApplyParams)
  const int32_t* seq = nullptr;        // [rows] batch row of `table` (the row's sequence)
  const int64_t* positions = nullptr;  // [rows] absolute positions, >= 0 and < 2^24
  const int64_t* seq_end = nullptr;    // [table batch] optional, see above
  PagedTable table;                    // SWA table, entry_bytes == kSwaEntryBytes
  uint8_t* chunk_entries = nullptr;    // [rows, 528] optional copy of every row's entry
  int64_t rows = 0;
  int64_t x_stride = 0;  // elements between rows of x; 0 = dim (512)
  int32_t ring_block = 0;
  int32_t window = 128;
  bool write_ring = true;
  float eps = 1e-6f;
  ActPrecision precision = ActPrecision::kF32;
  int32_t dim = kKvDim;  // row width (512 above); entries swa_entry_bytes(dim)
  int32_t rope_dim = kKvRopeDim;
};

// Compressor of a ratio-1 owner (layer 20): every row emits a group (group index = position):
//   latent[r] = rms_norm(x[r], comp_norm)                        (pre-RoPE, stored in fp32)
//   entry     = fp4_e4m3_16(RoPE(latent[r], positions[r]))      -> compressed entry positions[r]
// of batch row seq[r] of `table` (the owner's compressed-KV table).
struct CompressRatio1Params {
  const void* x = nullptr;             // [rows, 512] compressor wkv output, fp32 or bf16
  const float* norm_weight = nullptr;  // [512] comp_norm weight
  const float* freqs = nullptr;        // [32]
  const int32_t* seq = nullptr;        // [rows] batch row of `table`
  const int64_t* positions = nullptr;  // [rows] absolute positions (= group indices)
  float* latent = nullptr;             // [rows, 512] fp32 pre-RoPE latents (index-key input)
  PagedTable table;                    // compressed-KV table, entry_bytes == kCompEntryBytes
  int64_t rows = 0;
  int64_t x_stride = 0;  // elements; 0 = dim (512)
  float eps = 1e-6f;
  ActPrecision precision = ActPrecision::kF32;
  int32_t dim = kKvDim;  // row width (512 above); entries comp_entry_bytes(dim)
  int32_t rope_dim = kKvRopeDim;
};

// Carried tail of a ratio-2 compressor, one per sequence (the CPU's BlockState tail_kv/tail_score):
//   state[state_row] = float[2 (kind: 0 kv, 1 score)][2 (slot = position % 2)][512]
// i.e. the CPU's tail_kv ([slot, 512]) followed by its tail_score. A group whose even position
// was in an earlier launch reads its kv/score from slot 0. After a launch the state equals the
// CPU's: slot p % 2 holds the rows of the sequence's last two positions (the owner initialises a
// new sequence's state, e.g. score = -inf; the kernels never read a slot before it was written).
// At width dim (CompressRatio2Params::dim) a state row is ratio2_state_floats(dim) = 4 * dim
// floats.
DI_HOST_DEVICE constexpr int64_t ratio2_state_floats(int64_t dim) {
  return 2 * 2 * dim;
}
inline constexpr int64_t kRatio2StateFloats = ratio2_state_floats(kKvDim);

// One CTA's work in the ratio-2 compressor, built on the host by plan_compressor
// (kv_write.cuh) from the rows' sequences and positions.
//   group part (row_odd >= 0): group `group` of sequence `seq` = positions 2g (row_even, or the
//     carried slot 0 when row_even < 0) and 2g + 1 (row_odd): softmax-pooled latent to
//     latent[latent_row], compressed entry `group` of table batch row `seq`.
//   tail part (tail_last >= 0): after the group part, store row tail_last into slot
//     tail_last_slot and row tail_prev (if >= 0) into the other slot of state[state_row]. Exactly
//     one work item per sequence has a tail part: the one that reads that sequence's carried slot
//     if there is one, so that no other CTA touches the sequence's state (no race by construction).
struct Ratio2Work {
  int64_t group = -1;
  int32_t seq = 0;
  int32_t state_row = 0;
  int32_t row_even = -1;
  int32_t row_odd = -1;
  int32_t latent_row = -1;
  int32_t tail_prev = -1;
  int32_t tail_last = -1;
  int32_t tail_last_slot = 0;
};

// Compressor of a ratio-2 owner (layers 2, 8, 14); rows of a sequence may be in any order and split
// into chunks of any length across launches (the plan pairs them).
//   latent = rms_norm(sum_s softmax_s(score) * kv, comp_norm)   (per channel over the 2 slots)
//   entry  = fp4_e4m3_16(RoPE(latent, 2 * group))              -> compressed entry `group`
struct CompressRatio2Params {
  const void* kv = nullptr;            // [rows, 512] compressor wkv output, fp32 or bf16
  const void* score = nullptr;         // [rows, 512] compressor wgate output, same dtype
  const float* norm_weight = nullptr;  // [512] comp_norm weight
  const float* freqs = nullptr;        // [32]
  const Ratio2Work* work = nullptr;    // [works] (device memory), from plan_compressor
  float* state = nullptr;              // [state rows, ratio2_state_floats(dim)] carried tails
  float* latent = nullptr;             // [groups, 512] fp32 pre-RoPE latents of emitted groups
  PagedTable table;                    // compressed-KV table, entry_bytes == kCompEntryBytes
  int64_t works = 0;
  int64_t x_stride = 0;  // elements between rows of kv and of score; 0 = dim (512)
  float eps = 1e-6f;
  ActPrecision precision = ActPrecision::kF32;
  int32_t dim = kKvDim;  // row width (512 above); state rows ratio2_state_floats(dim)
  int32_t rope_dim = kKvRopeDim;
};

// Index keys of an owner: for each emitted group g (latent row g),
//   k = rms_norm(wk . latent[g], k_norm)   [128]   (wk bf16 widened exactly, fp32 dot products)
//   entry = fp4_ue8m0_32(RoPE(k, group[g] * ratio) on the last 64)  -> index key group[g]
// of batch row seq[g] of `table` (the owner's index-key table).
struct IndexKeyParams {
  const float* latent = nullptr;       // [groups, 512] fp32 pre-RoPE latents
  const uint16_t* wk = nullptr;        // [128, 512] bf16 (indexer wk)
  const float* norm_weight = nullptr;  // [128] k_norm weight
  const float* freqs = nullptr;        // [32]
  const int32_t* seq = nullptr;        // [groups] batch row of `table`
  const int64_t* group = nullptr;      // [groups] group (= index-key entry) indices
  PagedTable table;                    // index-key table, entry_bytes == kIndexKeyBytes
  int64_t groups = 0;
  int32_t ratio = 1;  // RoPE position = group * ratio
  float eps = 1e-6f;
  int32_t latent_dim = kKvDim;  // latent width (512 above); wk is [dim, latent_dim] bf16
  int32_t dim = kIndexDim;      // key width (128 above); entries index_key_bytes(dim)
  int32_t rope_dim = kKvRopeDim;
};

}  // namespace di
