#pragma once

// The DeepSeek-V4.1 forward on the CUDA backend (issue 8): the CPU reference's arithmetic
// (model/deepseek_v41/model.cc, attention.cc) as a sequence of the GPU kernels of
// src/kernels/cuda over device-resident weights (the checkpoint's own formats: FP8 blocks, FP4
// rows, bf16) and a device-resident cache per sequence in the quantised entry formats of
// kernels/params/kv_cache.h. Design and kernel inventory: docs/design/cuda_forward.md.
//
// Today: activations in fp32 storage (--precision fp32: exact-order linears, the fixtures' fp32
// rule) or bf16 storage (--precision bf16: the reference's bf16 run, tensor-core linears); the
// chunks of a forward call run as one batched step (every launch covers the rows of all sequences;
// each sequence's arithmetic is its own: row-wise kernels, per-row tables); plain stream-ordered
// launches (no graph capture yet); DSpark drafting on the GPU (CudaForwardOptions::drafter)
// or on the CPU reference.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engram/token_map.h"
#include "kernels/params/sparse_attention.h"
#include "model/forward_api.h"

namespace di {

// Where a CUDA model's DSpark draft stages run (CudaForwardOptions::drafter).
enum class DsparkDrafter : uint8_t { kGpu, kCpuReference, kNone };

struct CudaForwardOptions {
  int device = 0;  // CUDA device ordinal
  // Linear layers of the fp32 precision (bf16 always uses the tensor-core kernels): false
  // (default) = exact-order CUDA-core kernels whose outputs are
  // bitwise the CPU reference's (kernels/params/linear_exact.h), so the fp32 run follows the
  // reference's quantisation decisions; true = the FP8/FP4 tensor-core kernels (fp8_gemm,
  // moe_expert_gemm, wo_a), the speed path, whose FP8 accumulation is ~2^-13 relative.
  bool tensor_core_linears = false;
  // Record CUDA events at block boundaries of every forward (benchmarks): see
  // cuda_forward_block_ms.
  bool time_blocks = false;
  // Record a CUDA event after every launch and copy (benchmarks): cuda_forward_op_times. The
  // time between two events goes to the later op, so a host-bound gap before a launch counts
  // as that launch's.
  bool time_ops = false;
  // Benchmarks: every forward step starts with a kernel that holds the stream this long
  // (gpu_spin), so that the host has enqueued the step's launches before the GPU runs them and the
  // timings above show GPU execution without host-bound gaps. 0: none.
  double start_delay_us = 0;
  // The sequences' cache: one device pool of fixed-size pages (the engine's KvCacheManager
  // layout). 0 bytes: half of the device memory the weights leave free.
  uint64_t kv_cache_bytes = 0;
  int64_t kv_cache_page_bytes = 64 * 1024;
  // The DSpark drafter of models with draft stages (ignored for models without):
  //   kGpu          the stage blocks with the draft-block attention, the stage head and the
  //                 Markov loop as CUDA kernels, the stage rings in the device cache (passed its
  //                 fixtures and parity tests on the H200, twenty-first session);
  //   kCpuReference the CPU reference drafts inside the CUDA model (the earlier path, kept as a
  //                 yardstick);
  //   kNone         the draft stages' weights are loaded nowhere (~7 GB of GPU memory at
  //                 V4.1-Flash go to the cache instead) and dspark_prefill / dspark_step are an
  //                 error. The engine, which does not draft yet, loads without one.
  DsparkDrafter drafter = DsparkDrafter::kGpu;
  // The sparse-attention kernel of the 64 x 512 layers (SparseAttnParams::tensor_kernel), the
  // same for every step of the model, so results stay batch-invariant: kAuto (wgmma in bf16 on
  // sm_90, mma.sync otherwise: the throughput choice), kMmaSync (~1.6 % lower batch-1 decode
  // latency, slower from batch ~64 and in prefill: docs/PERF.md), kWgmma (bf16 only).
  AttnTensorKernel attention_kernel = AttnTensorKernel::kAuto;
};

// Loads a DeepSeek-V4.1 checkpoint directory onto the GPU (all weights into device memory).
// Throws di::Error naming the tensor, the size and the free memory when something does not fit.
std::unique_ptr<ForwardModel> load_cuda_forward_model(
    const std::filesystem::path& model_dir, const ForwardOptions& options,
    const CudaForwardOptions& cuda = {},
    std::optional<CompressedTokenMap> token_map = std::nullopt);

// GPU milliseconds of each backbone block (Engram included) in the last forward chunk, then one
// more entry for the final collapse + norm + head. The model must come from
// load_cuda_forward_model with time_blocks set (di::Error otherwise).
std::vector<double> cuda_forward_block_ms(const ForwardModel& model);
// Host milliseconds between the same block boundaries (the time the host spent enqueuing each
// block's launches). A block whose host time reaches its GPU time keeps the GPU waiting.
std::vector<double> cuda_forward_block_host_ms(const ForwardModel& model);
// Host milliseconds of the last forward call's phases (time_blocks): the input checks, waiting for
// earlier GPU work on the model's streams, the pinned arena's reset, the page tables, the rest
// before block 0 (Engram hashing, uploads, embedding), enqueuing the blocks and the head, waiting
// for the GPU to finish, and after it (results). The GPU idles in all but the enqueuing and the
// wait.
std::vector<double> cuda_forward_step_phase_ms(const ForwardModel& model);

// GPU time per op name summed over the forwards since the last reset (model loaded with
// time_ops; di::Error otherwise): name, GPU milliseconds, number of launches, and the host
// milliseconds spent preparing and enqueuing them; largest GPU time first.
struct CudaOpTime {
  std::string op;
  double ms = 0;
  int64_t launches = 0;
  double host_ms = 0;
};
std::vector<CudaOpTime> cuda_forward_op_times(const ForwardModel& model);
void cuda_forward_reset_op_times(ForwardModel& model);

}  // namespace di
