#pragma once

// Params of the fused single-pass mHC ops (delta spec §5.3), hc_mult = 4, 24 mixes. Framework-free
// and backend-free: raw pointers, sizes and the tensor contract of every argument.
//
// One mHC site (attention or FFN of a block) on a stream X [T, 4, D]:
//   pre side:  (pre, post, comb) = mixes(X, fn, scale, base)      -- 24 mixes, sigmoid, Sinkhorn
//              collapsed = sum_j carried_pre[j] * X_j             -- the PREVIOUS site's pre
//   post side: X'_k = post[k] * y + sum_j comb[j][k] * X_j          -- hc_expand
// The CPU references are cpu::hc_mixes / hc_collapse / hc_expand (kernels/cpu/mhc.h).

#include <cstdint>

namespace di {

inline constexpr int kMhcStreams = 4;                              // hc_mult
inline constexpr int kMhcMixes = (2 + kMhcStreams) * kMhcStreams;  // 24: 4 pre, 4 post, 16 comb

// Storage of the stream, the collapsed input, the block output and the new stream; the math is
// fp32 in both. kF32 matches the fp32 fixtures (--precision fp32); kBf16 rounds every stored
// activation to bf16 (RNE), like the reference's bf16 run (--precision bf16).
enum class MhcStorage : uint8_t { kF32, kBf16 };

// The pre side of one site, for T tokens. dim % 64 == 0; stream / collapsed 16-byte aligned.
// Bitwise batch-invariant: a row's outputs do not depend on T or on the row's position.
struct MhcPreParams {
  const void* stream = nullptr;         // [T, 4, dim] X, fp32 or bf16 bits (storage)
  const uint32_t* fn_packed = nullptr;  // fn [24, 4 * dim] as bf16 pieces, mhc_pack_fn order
  const float* scale = nullptr;         // [3] (pre, post, comb)
  const float* base = nullptr;          // [24]
  const float* carried_pre = nullptr;   // [T, 4] pre-mix of the previous site (layer 0: one-hot)
  int64_t tokens = 0;                   // T >= 0
  int64_t dim = 0;                      // D: 5120 (V4.1), 4096 (V4), any multiple of 64
  MhcStorage storage = MhcStorage::kF32;
  float norm_eps = 1e-20f;  // rms eps of the flattened row (rms_norm_eps)
  float hc_eps = 1e-6f;
  int sinkhorn_iters = 20;
  void* collapsed = nullptr;   // [T, dim] storage: sum_j carried_pre[t, j] * X[t, j, :]
  float* pre = nullptr;        // [T, 4]  sigmoid(m * scale0 + base) + hc_eps
  float* post = nullptr;       // [T, 4]  2 * sigmoid(m * scale1 + base)
  float* comb = nullptr;       // [T, 4, 4] comb[t][j][k], Sinkhorn-normalised
  float* workspace = nullptr;  // [mhc_pre_workspace_bytes(T, dim) / 4] partial sums
};

// The post side (hc_expand): out[t, k, :] = post[t, k] * y[t, :] + sum_j comb[t, j, k] * in[t, j,
// :]. stream_out may alias stream_in (each element is read before it is written, by one thread).
struct MhcPostParams {
  const void* y = nullptr;          // [T, dim] block output, storage
  const void* stream_in = nullptr;  // [T, 4, dim] storage
  const float* post = nullptr;      // [T, 4]
  const float* comb = nullptr;      // [T, 4, 4]
  int64_t tokens = 0;
  int64_t dim = 0;  // multiple of 8
  MhcStorage storage = MhcStorage::kF32;
  void* stream_out = nullptr;  // [T, 4, dim] storage
};

// The collapse alone (the final norm's input after the last block): out[t, :] = sum_j pre[t, j] *
// stream[t, j, :], fp32 in the CPU order (acc = 0; acc += pre * x, j ascending; no contraction).
struct MhcCollapseParams {
  const void* stream = nullptr;  // [T, 4, dim] storage, 16-byte aligned
  const float* pre = nullptr;    // [T, 4]
  int64_t tokens = 0;
  int64_t dim = 0;  // multiple of 8
  MhcStorage storage = MhcStorage::kF32;
  void* out = nullptr;  // [T, dim] storage, 16-byte aligned
};

}  // namespace di
