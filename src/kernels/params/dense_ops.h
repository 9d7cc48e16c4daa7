#pragma once

// Params of the dense small ops of the CUDA backend (issue 6): RMSNorm (alone and fused with the
// FP8 activation quantization), act_quant, RoPE, embedding gather, LM head and the sampler. Raw
// pointers, sizes and the tensor contract (shape, dtype) of every argument; no CUDA types, so the
// model code can fill them from .cc files. The launchers live in kernels/cuda/ops/<op>.cuh; they
// validate the Params (di::Error naming the op and the sizes), never allocate, never synchronize.
//
// Precision: activations are stored either in fp32 or in bf16 (`--precision fp32|bf16`); the
// arithmetic is fp32 in both, bf16 storage rounds (RNE) once when a result is written.
//
// Batch invariance: every op below computes each row with an arithmetic that depends only on that
// row's inputs (never on the number of rows or on the other rows), so a row's output is bitwise
// the same whatever batch it is computed in.

#include <cstdint>

namespace di {

// Storage type of activation tensors. fp32 = float, bf16 = uint16_t bits.
enum class ActPrecision : uint8_t { kF32, kBF16 };

// y[r, :] = weight * (x[r, :] * s_r), s_r = 1 / sqrt(mean(x[r, :]^2) + eps), all in fp32; the
// CPU reference is cpu::rms_norm<float> (on x widened to fp32 for bf16 storage, y rounded to bf16).
// dim % 4 == 0 and dim <= 32768. x == y (in place) is allowed.
struct RmsNormParams {
  const void* x = nullptr;        // [rows, dim] fp32 or bf16 (precision), row stride x_stride
  const float* weight = nullptr;  // [dim] fp32 (nullptr = no weight)
  void* y = nullptr;              // [rows, dim] same dtype as x, row stride y_stride
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t x_stride = 0;  // elements between rows; 0 = dim
  int64_t y_stride = 0;  // elements between rows; 0 = dim
  float eps = 1e-6f;
  ActPrecision precision = ActPrecision::kF32;
};

// FP8 activation quantization of the reference (cpu::act_quant_e4m3, delta spec §3.2), per block
// of `block` consecutive columns of a row (32 for V4.1, 128 for V4):
//   a = max(fp32(amax|x|), 1e-4f); t = fp32(a * fp32(1/448)); s = 2^ceil(log2 t) (UE8M0 byte)
//   code = e4m3_rne(clamp(x / s, -448, 448))
// so that e4m3(code) * 2^(scale - 127) is the reference's quantized value, bit for bit.
// dim % block == 0, dim % 4 == 0.
struct ActQuantParams {
  const void* x = nullptr;    // [rows, dim] fp32 or bf16 (precision), row stride x_stride
  uint8_t* codes = nullptr;   // [rows, dim] e4m3fn codes, row stride = dim
  uint8_t* scales = nullptr;  // [rows, dim / block] ue8m0 bytes, row-major
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t x_stride = 0;  // elements; 0 = dim
  int block = 32;
  ActPrecision precision = ActPrecision::kF32;
};

// RMSNorm fused with act_quant: codes/scales of act_quant(rms_norm(x)), where the normed row is
// exactly the one rms_norm writes (same kernel code), optionally also stored in `y`.
struct RmsNormQuantParams {
  RmsNormParams norm;         // norm.y may be nullptr (the normed row is not stored then)
  uint8_t* codes = nullptr;   // [rows, dim] e4m3fn codes
  uint8_t* scales = nullptr;  // [rows, dim / block] ue8m0 bytes
  int block = 32;
  // Optional (nullable, block 32 only): the same codes once more with each 32-block's even
  // columns first, then its odd ones — the FP4 expert GEMM's activation order
  // (moe_interleave_act's layout), so that the MoE needs no separate interleave launch.
  uint8_t* codes_interleaved = nullptr;
};

// Rotary embedding of the last rope_dim elements of every head vector, in place: pairs
// (x[2i], x[2i+1]) of that tail are rotated by angle = fp32(pos) * freqs[i] (inverse: by -angle),
// cos/sin rounded to fp32 from a double evaluation, products and sums in unfused fp32, like
// cpu::RopeTable<float>::apply. freqs is the per-layer-kind table (cpu::rope_frequencies<float>:
// theta 10000 plain; theta 160000 with YaRN for compressed layers), uploaded once by the caller.
struct RopeApplyParams {
  void* x = nullptr;                   // [rows, heads, head_dim] fp32 or bf16, row stride x_stride
  const int64_t* positions = nullptr;  // [rows] absolute positions, >= 0 and < 2^24
  const float* freqs = nullptr;        // [rope_dim / 2]
  int64_t rows = 0;
  int64_t heads = 1;
  int64_t head_dim = 0;
  int64_t rope_dim = 64;  // even, <= head_dim; the rotated part starts at head_dim - rope_dim
  int64_t x_stride = 0;   // elements between rows; 0 = heads * head_dim
  bool inverse = false;
  ActPrecision precision = ActPrecision::kF32;
};

// out[r, c, :] = table[ids[r], :] for c in [0, copies): the token embedding, widened exactly from
// bf16 to fp32 (or kept in bf16). copies = hc_mult (4) builds the hc stream; 1 a plain row. ids
// must be in [0, vocab): the caller checks them on the host (an id outside gives a NaN row).
struct EmbeddingParams {
  const uint16_t* table = nullptr;  // [vocab, dim] bf16
  const int64_t* ids = nullptr;     // [rows]
  void* out = nullptr;              // [rows, copies, dim] fp32 or bf16 (precision)
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t dim = 0;  // % 8 == 0
  int64_t copies = 1;
  ActPrecision precision = ActPrecision::kF32;
};

// logits[m, n] = sum_k x[m, k] * W[n, k], bf16 weights widened exactly, fp32 products and sums.
// Each output is accumulated in one fixed order (lane-strided 8-element chunks of k, then a fixed
// warp tree), the same for every number of rows: no split-K, rows are batch-invariant. The CPU
// reference is cpu::linear<float> (ascending k), so results agree to fp32 rounding (~1e-6 rel).
// Any dim > 0: dim % 256 == 0 runs the vectorised kernel (x and weight 16-byte aligned), other dims
// (the fixture models' small projections) a scalar one with lane-strided single elements of k in
// place of the 8-element chunks; the choice depends on dim only.
struct LmHeadParams {
  const void* x = nullptr;  // [rows, dim] fp32, or bf16 bits (x_precision; widened exactly)
  ActPrecision x_precision = ActPrecision::kF32;
  const uint16_t* weight = nullptr;  // [vocab, dim] bf16
  float* logits = nullptr;           // [rows, vocab] fp32, row stride logits_stride
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t dim = 0;
  int64_t logits_stride = 0;  // elements; 0 = vocab
};

// One row of the GPU sampler: the SamplingParams of its request reduced to what the kernel needs,
// with every transcendental the CPU computes on the host (log(min_p), 1/r) precomputed by
// make_sampler_row (kernels/cuda/ops/sampler.cuh) so that host and device use the same bits.
struct SamplerRowParams {
  uint64_t seed = 0;
  int64_t position = 0;         // absolute position of the sampled token (Philox counter)
  float temperature = 1.0f;     // fp32(params.temperature); used when !greedy && scaled
  float repetition = 1.0f;      // fp32(r)
  float inv_repetition = 1.0f;  // fp32(1 / fp32(r))
  float frequency = 0.0f;
  float presence = 0.0f;
  double log_min_p = 0;  // log(min_p) (host libm), -inf when min_p == 0
  double top_p = 1.0;
  int64_t top_k = 0;      // 0 = off (already reduced: top_k >= vocab is off)
  int32_t greedy = 0;     // temperature < 1e-5
  int32_t scaled = 0;     // !greedy && temperature != 1
  int32_t penalties = 0;  // any of repetition / frequency / presence active
  int32_t logprobs = -1;  // top-N logprobs wanted (0..20), -1 = none
  // Token id lists, as ranges of SamplerParams::ids (int64): the prompt (repetition penalty),
  // the output so far (penalties), and the ids suppressed while min_tokens is pending (EOS and
  // stop_token_ids; an empty range when nothing is suppressed).
  int64_t prompt_begin = 0, prompt_end = 0;
  int64_t output_begin = 0, output_end = 0;
  int64_t suppress_begin = 0, suppress_end = 0;
};

// Status of one sampled row (SamplerParams::status); anything but kOk leaves token = -1. The CPU
// sampler throws di::Error in the same cases.
enum class SamplerStatus : int32_t {
  kOk = 0,
  kNaN = 1,          // the processed row holds a NaN (or the raw row, when logprobs are asked)
  kAllMasked = 2,    // every token is -inf
  kInfinite = 3,     // +inf after temperature (or in the raw row, when logprobs are asked)
  kNoCandidate = 4,  // nothing eligible (cannot happen for a valid row)
  kBadTokenId = 5,   // an id of the lists outside [0, vocab)
};

// The CPU sampler (sampling/sampler.h) on the GPU, one CTA per row: same Philox noise, same
// processor order and tie rules; token choices identical (docs/design/cuda_dense_ops.md).
struct SamplerParams {
  const float* logits = nullptr;  // [rows, vocab] raw fp32 logits, row stride logits_stride
  const SamplerRowParams* row_params = nullptr;  // [rows] (device memory)
  const int64_t* ids = nullptr;  // the id lists of all rows, concatenated (device memory)
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t logits_stride = 0;  // 0 = vocab
  // [rows] the logits row each sampled row reads (device memory); nullptr: row r reads row r.
  const int64_t* logits_rows = nullptr;
  void* workspace = nullptr;  // sampler_workspace_bytes(rows, vocab) bytes, 256-byte aligned
  int64_t* tokens = nullptr;  // [rows] sampled ids (-1 on error)
  int32_t* status = nullptr;  // [rows] SamplerStatus
  // Logprobs (rows with logprobs >= 0 only; may be nullptr when no row asks):
  int64_t* top_ids = nullptr;       // [rows, 20] rank order, -1 past the row's N
  double* top_logprobs = nullptr;   // [rows, 20]
  double* token_logprob = nullptr;  // [rows] of the sampled token
  int64_t* token_rank = nullptr;    // [rows] 1 = most likely
};

inline constexpr int kSamplerMaxLogprobs = 20;

}  // namespace di
