// cuda_forward_bench MODEL_DIR [--prompt N] [--decode N] [--batch B] [--exact | --bf16]
//                    [--extrapolate CONFIG [--gpus G] [--expert-gbs R] [--full-experts DIR]]
//                    [--ops] [--gpu-only]
//                    [--host-logits]
// The CUDA forward of a DeepSeek-V4.1 checkpoint (e.g. `deepinfer synth --config v41-flash
// --layers 4`): B sequences (--batch, default 1), each prefilled with N tokens (one forward call
// per sequence), then decode steps of one token per sequence, all B in one batched forward call;
// per backbone block the mean GPU time of a decode step (CUDA events at block boundaries, Engram
// included) against the HBM floor of that block at batch B: the bytes of the weights it touches
// (attention, mHC, router, the routed experts B tokens are expected to pick under uniform routing,
// E * (1 - (1 - k/E)^B) of E, the shared expert, Engram wkv and staged rows) plus the KV bytes its
// attention and indexer read for B sequences at this context, over the device-to-device copy
// bandwidth measured in the same run. --exact: the fp32 run's exact-order linear layers
// (validation speed); --bf16: the bf16 precision (bf16 activations, tensor-core kernels);
// default: fp32 activations with the FP8/FP4 tensor-core kernels. --extrapolate CONFIG (a preset
// such as v41-flash, or a config.json): the full model's decode step at batch B, each of its
// layers timed as the mean of the measured layers of the same role (ratio, attention mode,
// candidate pool, Engram; e.g. a checkpoint from `deepinfer synth --layer-ids
// 0,1,2,3,14,20,21,24,25`), plus the measured head. When the measured checkpoint keeps fewer routed
// experts than CONFIG (synth --experts) and B > 1, the full model's extra expected expert bytes are
// added at the measured copy bandwidth (printed as its own term: an estimate, not a measurement),
// or at R GB/s with --expert-gbs R: a rate measured for the full expert count at this batch's
// routing density (`moe_bench B`'s "experts" column, TB/s x 1000), which the FP4 expert kernel
// reaches rather than the copy bandwidth. --full-experts DIR: measure that term instead — DIR is
// a checkpoint of the same config keeping all routed experts on a few layers (e.g. `deepinfer
// synth --layer-ids 2,3`), run after MODEL_DIR with the same options; each of its layers minus
// MODEL_DIR's layers of the same role is the time the full expert count adds to a layer, and
// their mean is added to every layer with routed experts.
// --gpus G (with --extrapolate): also an estimate for G GPUs serving G x B sequences with data
// parallel attention (each GPU runs the measured B sequences' dense work) and expert parallelism
// (each GPU holds E / G routed experts and streams its share of the experts G x B tokens pick):
// the one-GPU step at batch B, minus its routed-expert bytes, plus 1/G of the bytes at G x B (at
// the copy bandwidth), plus two all-to-alls per MoE layer (token dispatch in FP8 with its scales,
// combine in bf16; the (G - 1)/G of the pairs that leave their GPU) at kA2aGBs with kA2aLatencyUs
// each — assumed NVLink figures, not measured here.
// --ops: also the decode step's GPU time per op (an event after every launch; a host-bound gap
// counts as the next launch's), largest first, with the host time spent enqueuing each op; and
// the same table for the prefill of sequence 1 (0 when alone), and with --dspark for the drafting
// steps (those without logits). Decode: one untimed warm-up step, then --decode timed steps.
// --gpu-only: each decode step starts behind a 30 ms GPU spin, so the host has enqueued the whole
// step before the GPU runs it: the block and op times are then GPU execution alone (launch gaps
// included, host-bound waits excluded); the wall ms/step includes the spin.
// --attention-kernel mma-sync|wgmma: the sparse-attention kernel (CudaForwardOptions::
// attention_kernel; default auto).
// --kernel-trace CSV: every kernel of the timed decode steps through CUPTI (GPU start and end as
// they ran, PDL overlap kept): a table per kernel name (GPU µs and launches per step) and the
// step's idle GPU time; every kernel's interval is written to CSV.
// Decode steps pick each next token greedily with the GPU sampler (SequenceChunk::sampling, as the
// engine does): only token ids come back. --host-logits: the logits come back and the argmax runs
// on the host (the path before GPU sampling).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "common/check.h"
#include "common/error.h"
#include "config/model_config.h"
#include "engram/token_map.h"
#include "kernel_trace.h"
#include "kernels/params/kv_cache.h"
#include "model/deepseek_v41/cuda_model.h"
#include "model/layer_plan.h"
#include "model/synth.h"
#include "roofline.h"

namespace {

using di::bench::dspark_step_bytes;
using di::bench::weight_bytes_per_block;

// KV bytes block b's attention and indexer read for one query at context `ctx`.
double kv_bytes(const di::ModelConfig& cfg, const di::LayerPlan& p, int64_t ctx) {
  const int hd = static_cast<int>(cfg.head_dim);
  double bytes = static_cast<double>(std::min(ctx, cfg.sliding_window)) * di::swa_entry_bytes(hd);
  if (p.compress_ratio > 0) {
    const int64_t visible = ctx / p.compress_ratio;
    bytes += static_cast<double>(std::min(visible, cfg.index_topk)) * di::comp_entry_bytes(hd);
    if (p.mode == di::AttnMode::kFull || p.mode == di::AttnMode::kReindex) {
      bytes +=
          static_cast<double>(visible) * di::index_key_bytes(static_cast<int>(cfg.index_head_dim));
    }
  }
  return bytes;
}

// The role of a layer for the extrapolation: layers of one role run the same kernels on the same
// shapes (up to the KV they read, which the context sets alike for all of them).
std::string role_of(const di::LayerPlan& p) {
  return std::to_string(p.compress_ratio) + "/" + std::string(di::attn_mode_name(p.mode)) +
         (p.candidate_builder ? "/pool" : "") + (p.candidate_reader ? "/reads-pool" : "") +
         (p.engram_slot >= 0 ? "/engram" : "");
}

// The bench's options for one checkpoint.
struct RunOptions {
  int64_t prompt = 4096, decode = 16, batch = 1;
  bool exact = false, bf16 = false, ops = false, gpu_only = false, host_logits = false;
  std::string trace_csv;  // --kernel-trace (empty: none)
  di::AttnTensorKernel attention_kernel = di::AttnTensorKernel::kAuto;  // --attention-kernel
  int64_t dspark = 0;  // --dspark N: N GPU drafting steps of every sequence after the decode
                       // steps (one batched dspark_steps call each)
};

// What the extrapolation needs of one measured checkpoint.
struct Measured {
  di::ModelConfig cfg;
  std::vector<di::LayerPlan> plan;
  std::vector<double> block_us;  // per backbone block, µs per decode step
  double head_us = 0;
  double copy_gbs = 0;
  std::string device;  // the GPU it ran on (the extrapolation is for one such GPU)
};

// The full model's decode step from the measured per-block microseconds; returns false (and
// names the role) when the measured checkpoint lacks a role the full model has.
// Assumed all-to-all figures for the --gpus estimate (H200 NVLink 4: 450 GB/s per direction
// nominal; a low-latency all-to-all kernel's fixed cost).
constexpr double kA2aGBs = 350.0;
constexpr double kA2aLatencyUs = 15.0;

bool extrapolate(const std::string& config, const Measured& m, const Measured* all_experts,
                 int64_t ctx, int64_t batch, int64_t gpus, double expert_gbs) {
  const di::ModelConfig& measured_cfg = m.cfg;
  const std::vector<di::LayerPlan>& measured = m.plan;
  const std::vector<double>& us = m.block_us;
  const double head_us = m.head_us, copy_gbs = m.copy_gbs;
  // The rate of the routed-expert bytes the measured checkpoint lacks.
  const double extra_gbs = expert_gbs > 0 ? expert_gbs : copy_gbs;
  const di::ModelConfig full = di::parse_model_config(di::load_config_json(config).dump(), config);
  const std::vector<di::LayerPlan> plan = di::build_layer_plan(full);
  std::vector<double> full_experts, measured_experts;
  const std::vector<double> wbytes = weight_bytes_per_block(full, plan, batch, &full_experts);
  (void)weight_bytes_per_block(measured_cfg, measured, batch, &measured_experts);
  // Per role of the measured layers: summed µs, summed routed-expert bytes (to scale to the full
  // expert count), layers.
  struct RoleSum {
    double us = 0, expert_bytes = 0;
    int n = 0;
  };
  std::map<std::string, RoleSum> by_role;
  for (int64_t b = 0; b < measured_cfg.num_layers; ++b) {
    RoleSum& r = by_role[role_of(measured[static_cast<size_t>(b)])];
    r.us += us[static_cast<size_t>(b)];
    r.expert_bytes += measured_experts[static_cast<size_t>(b)];
    ++r.n;
  }
  // --full-experts: the routed experts' term measured rather than estimated. A layer of the
  // checkpoint that keeps all of the full model's experts, minus the measured layers of its role:
  // the time the full expert count adds to a layer at this batch (the same MoE shapes in every
  // layer, so one mean for all).
  std::optional<double> measured_delta;
  if (all_experts != nullptr) {
    if (all_experts->cfg.n_routed_experts != full.n_routed_experts) {
      std::printf(
          "extrapolation to %s: the --full-experts checkpoint has %lld routed experts, the "
          "model %lld\n",
          config.c_str(), static_cast<long long>(all_experts->cfg.n_routed_experts),
          static_cast<long long>(full.n_routed_experts));
      return false;
    }
    // The difference is only the expert count's if everything else has the same shapes.
    const di::ModelConfig& a = all_experts->cfg;
    if (a.hidden_size != measured_cfg.hidden_size ||
        a.moe_intermediate_size != measured_cfg.moe_intermediate_size ||
        a.num_experts_per_tok != measured_cfg.num_experts_per_tok ||
        a.num_heads != measured_cfg.num_heads) {
      std::printf(
          "extrapolation to %s: the --full-experts checkpoint's shapes (hidden %lld, expert "
          "width %lld, top-%lld, %lld heads) differ from the measured model's (%lld, %lld, %lld, "
          "%lld)\n",
          config.c_str(), static_cast<long long>(a.hidden_size),
          static_cast<long long>(a.moe_intermediate_size),
          static_cast<long long>(a.num_experts_per_tok), static_cast<long long>(a.num_heads),
          static_cast<long long>(measured_cfg.hidden_size),
          static_cast<long long>(measured_cfg.moe_intermediate_size),
          static_cast<long long>(measured_cfg.num_experts_per_tok),
          static_cast<long long>(measured_cfg.num_heads));
      return false;
    }
    double delta = 0;
    int n = 0;
    std::string terms;
    for (size_t b = 0; b < all_experts->plan.size(); ++b) {
      const di::LayerPlan& p = all_experts->plan[b];
      if (p.n_routed_experts == 0) continue;
      const std::string role = role_of(p);
      const auto it = by_role.find(role);
      if (it == by_role.end()) {
        std::printf(
            "extrapolation to %s: the --full-experts checkpoint's layer %zu has role %s, "
            "which the measured model lacks\n",
            config.c_str(), b, role.c_str());
        return false;
      }
      const double d = all_experts->block_us[b] - it->second.us / it->second.n;
      terms += " " + role + " " + std::to_string(static_cast<int64_t>(std::lround(d))) + " us;";
      delta += d;
      ++n;
    }
    if (n == 0) {
      std::printf("extrapolation to %s: the --full-experts checkpoint has no routed experts\n",
                  config.c_str());
      return false;
    }
    measured_delta = delta / n;
    std::printf(
        "  full-expert layers minus this checkpoint's layers of the same role:%s mean "
        "%.1f us a layer with routed experts\n",
        terms.c_str(), *measured_delta);
  }
  double total = head_us, floor_total = 0, extra_expert_us = 0;
  std::map<std::string, int> counts;
  for (int64_t b = 0; b < full.num_layers; ++b) {
    const std::string role = role_of(plan[static_cast<size_t>(b)]);
    auto it = by_role.find(role);
    if (it == by_role.end()) {
      std::printf("extrapolation to %s: layer %lld has role %s, which the measured model lacks\n",
                  config.c_str(), static_cast<long long>(b), role.c_str());
      return false;
    }
    const RoleSum& r = it->second;
    total += r.us / r.n;
    if (measured_delta) {
      if (full_experts[static_cast<size_t>(b)] > 0) extra_expert_us += *measured_delta;
    } else {
      extra_expert_us +=
          std::max(0.0, full_experts[static_cast<size_t>(b)] - r.expert_bytes / r.n) /
          (extra_gbs * 1e9) * 1e6;
    }
    floor_total +=
        (wbytes[static_cast<size_t>(b)] +
         static_cast<double>(batch) * kv_bytes(full, plan[static_cast<size_t>(b)], ctx)) /
        (copy_gbs * 1e9) * 1e6;
    ++counts[role];
  }
  total += extra_expert_us;
  std::printf("extrapolation to %s (%lld layers) at batch %lld, context %lld: roles",
              config.c_str(), static_cast<long long>(full.num_layers),
              static_cast<long long>(batch), static_cast<long long>(ctx));
  for (const auto& [role, n] : counts)
    std::printf(" %s x%d", role.c_str(), n);
  std::printf(
      "\n  decode step %.1f us (blocks + head%s) = %.1f tok/s; blocks' HBM floor %.1f us (%.2fx); "
      "one %s, no DSpark\n",
      total,
      measured_delta        ? ", + measured full-expert term"
      : extra_expert_us > 0 ? ", + estimated full-expert traffic"
                            : "",
      1e6 * static_cast<double>(batch) / total, floor_total, (total - head_us) / floor_total,
      m.device.c_str());
  if (measured_delta) {
    std::printf(
        "  (measured: +%.1f us for the routed experts the measured checkpoint lacks, the "
        "full-expert layers' mean difference in every layer with routed experts)\n",
        extra_expert_us);
  } else if (extra_expert_us > 0) {
    std::printf(
        "  (estimate: +%.1f us for the routed experts the measured checkpoint lacks, "
        "streamed at %s %.0f GB/s)\n",
        extra_expert_us, expert_gbs > 0 ? "the given" : "the copy bandwidth,", extra_gbs);
  }
  if (gpus > 1) {
    // The full model's routed-expert bytes per layer at G x B tokens, a GPU's share 1/G.
    std::vector<double> experts_g;
    (void)weight_bytes_per_block(full, plan, gpus * batch, &experts_g);
    double expert_delta_us = 0, a2a_us = 0;
    const double d = static_cast<double>(full.hidden_size);
    const double pairs_out = static_cast<double>(batch * full.num_experts_per_tok) *
                             static_cast<double>(gpus - 1) / static_cast<double>(gpus);
    for (int64_t b = 0; b < full.num_layers; ++b) {
      const double one = full_experts[static_cast<size_t>(b)];
      if (one <= 0) continue;  // no routed experts in this layer
      expert_delta_us += (experts_g[static_cast<size_t>(b)] / static_cast<double>(gpus) - one) /
                         (extra_gbs * 1e9) * 1e6;
      const double bytes = pairs_out * ((d + d / 32.0) + 2.0 * d);  // dispatch + combine
      a2a_us += 2.0 * kA2aLatencyUs + bytes / (kA2aGBs * 1e9) * 1e6;
    }
    const double total_g = total + expert_delta_us + a2a_us;
    std::printf(
        "  %lld GPUs (data-parallel attention, expert parallelism; an estimate): %lld sequences, "
        "step %.1f us = this GPU's %.1f %+.1f us of routed experts (1/%lld of %lld tokens' "
        "experts) + %.1f us of all-to-alls (assumed %.0f GB/s, %.0f us each) = %.1f tok/s\n",
        static_cast<long long>(gpus), static_cast<long long>(gpus * batch), total_g, total,
        expert_delta_us, static_cast<long long>(gpus), static_cast<long long>(gpus * batch), a2a_us,
        kA2aGBs, kA2aLatencyUs, 1e6 * static_cast<double>(gpus * batch) / total_g);
  }
  return true;
}

// GPU and host time per op (cuda_forward_op_times), largest first, per one of `steps` steps.
void print_op_table(const char* title, const char* time_column,
                    const std::vector<di::CudaOpTime>& times, double steps) {
  double all = 0;
  for (const di::CudaOpTime& t : times)
    all += t.ms;
  std::printf("%-28s %10s %9s %7s %10s\n", title, time_column, "launches", "share", "host us");
  for (const di::CudaOpTime& t : times) {
    std::printf("%-28s %10.1f %9.1f %6.1f%% %10.1f\n", t.op.c_str(), 1e3 * t.ms / steps,
                static_cast<double>(t.launches) / steps, 100.0 * t.ms / all,
                1e3 * t.host_ms / steps);
  }
}

// Loads `dir`, prefills, times the decode steps and prints the per-block table (and the op table
// and kernel trace when asked).
Measured run_model(const std::string& dir, const RunOptions& o) {
  const int64_t prompt = o.prompt, decode = o.decode, batch = o.batch;
  const bool exact = o.exact, bf16 = o.bf16, ops = o.ops, gpu_only = o.gpu_only,
             host_logits = o.host_logits;
  const bool kernel_trace = !o.trace_csv.empty();
  const std::string& trace_csv = o.trace_csv;
  const di::ModelConfig cfg = di::load_model_config(dir);
  const std::vector<di::LayerPlan> plan = di::build_layer_plan(cfg);
  const std::vector<double> wbytes = weight_bytes_per_block(cfg, plan, batch);
  di::Stream stream;
  const double copy = di::bench::copy_gbs(stream);
  di::ForwardOptions fo;
  if (bf16) fo.precision = di::Precision::kBf16;
  di::CudaForwardOptions co;
  co.tensor_core_linears = !exact;
  co.time_blocks = true;
  co.time_ops = ops;
  co.attention_kernel = o.attention_kernel;
  // The GPU drafter only when drafting is timed.
  co.drafter = o.dspark > 0 ? di::DsparkDrafter::kGpu : di::DsparkDrafter::kNone;
  DI_CHECK(o.dspark == 0 || cfg.num_nextn_predict_layers > 0,
           "--dspark: {} has no DSpark stages (deepinfer synth --draft-blocks 3)", dir);
  // --gpu-only: each step waits behind a 30 ms spin, so the host has enqueued it all first.
  if (gpu_only) co.start_delay_us = 30000;
  const auto t0 = std::chrono::steady_clock::now();
  // A synthetic checkpoint has no Engram token map (the engine derives it from the tokenizer):
  // any map of the right sizes gives the same speed.
  std::optional<di::CompressedTokenMap> map;
  if (!cfg.engram_layer_ids.empty() &&
      !std::filesystem::exists(std::filesystem::path(dir) / di::kEngramTokenMapFile)) {
    std::vector<int32_t> cls(static_cast<size_t>(cfg.vocab_size));
    for (size_t i = 0; i < cls.size(); ++i)
      cls[i] =
          static_cast<int32_t>((i * 7919) % static_cast<size_t>(cfg.engram_compressed_vocab_size));
    map.emplace(std::move(cls), cfg.engram_compressed_vocab_size, "synthetic map (bench)");
  }
  auto model = di::load_cuda_forward_model(dir, fo, co, std::move(map));
  const auto t1 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "loaded in %.1f s\n", std::chrono::duration<double>(t1 - t0).count());
  // Distinct prompts per sequence (no shared prefix), one prefill call each.
  std::vector<std::unique_ptr<di::SequenceState>> seqs;
  std::vector<int64_t> next(static_cast<size_t>(batch));
  std::vector<int64_t> ids(static_cast<size_t>(prompt));
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t i = 0; i < prompt; ++i)
      ids[static_cast<size_t>(i)] = (i * 7919 + 13 + s * 104729) % model->vocab_size();
    seqs.push_back(model->new_sequence());
    if (ops && s == std::min<int64_t>(1, batch - 1)) di::cuda_forward_reset_op_times(*model);
    // A forward step holds at most 65535 tokens: long prompts go in chunks.
    constexpr int64_t kChunk = 32768;
    for (int64_t off = 0; off < prompt; off += kChunk) {
      di::SequenceChunk chunk{
          seqs.back().get(),
          std::span<const int64_t>(ids).subspan(
              static_cast<size_t>(off), static_cast<size_t>(std::min(kChunk, prompt - off)))};
      const di::ForwardResult r = model->forward({&chunk, 1});
      if (off + kChunk >= prompt) {
        const auto& l = r.logits[0];
        next[static_cast<size_t>(s)] = std::max_element(l.begin(), l.end()) - l.begin();
      }
    }
    if (s == 0) std::fprintf(stderr, "sequence 0 prefilled\n");
    if (s == std::min<int64_t>(1, batch - 1) && ops) {
      // The op table of sequence 1's prefill (of sequence 0's when it is alone: that first
      // forward also grows the buffers).
      print_op_table("op (prefill of one sequence)", "us", di::cuda_forward_op_times(*model), 1);
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  const auto L = static_cast<size_t>(cfg.num_layers);
  std::vector<double> sum(L + 1, 0.0), host_sum(L + 1, 0.0);
  auto t3 = std::chrono::steady_clock::now();
  std::vector<di::SequenceChunk> chunks(static_cast<size_t>(batch));
  std::vector<double> phase_sum(8, 0.0);
  deepinfer::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<di::ChunkSampling> sampling(static_cast<size_t>(batch));
  std::optional<di::bench::KernelTrace> tracer;
  if (kernel_trace) tracer.emplace();
  // Each sequence's taps of the last decode step (--dspark).
  std::vector<std::vector<double>> last_taps(static_cast<size_t>(batch));
  // Step -1 is a warm-up: the first decode step after the prefills folds the pinned host
  // memory the prefills grew (tens of ms once) and grows the decode-sized buffers; it is not
  // timed.
  for (int64_t step = -1; step < decode; ++step) {
    if (step == 0) {
      t3 = std::chrono::steady_clock::now();
      if (ops) di::cuda_forward_reset_op_times(*model);
      if (tracer) tracer->start();
    }
    for (size_t s = 0; s < chunks.size(); ++s) {
      chunks[s] = di::SequenceChunk{seqs[s].get(), std::span<const int64_t>(&next[s], 1)};
      sampling[s].params = &greedy;
      sampling[s].row.position = seqs[s]->num_tokens() + 1;
      if (!host_logits) chunks[s].sampling = &sampling[s];
    }
    const di::ForwardResult r = model->forward(chunks);
    for (size_t s = 0; o.dspark > 0 && s < chunks.size(); ++s)
      last_taps[s] = r.main_hidden[s].back();
    for (size_t s = 0; s < chunks.size(); ++s) {
      if (!host_logits) {
        DI_CHECK(s < r.sampled.size() && r.sampled[s] && r.sampled[s]->error.empty(),
                 "sequence {} was not sampled on the GPU", s);
        next[s] = r.sampled[s]->result.token_id;
        continue;
      }
      const auto& l = r.logits[s];
      next[s] = std::max_element(l.begin(), l.end()) - l.begin();
    }
    const std::vector<double> ms = di::cuda_forward_block_ms(*model);
    DI_CHECK(ms.size() == sum.size(), "cuda_forward_block_ms: {} entries, expected {}", ms.size(),
             sum.size());
    if (step < 0) {
      std::fprintf(stderr, "warm-up decode step done\n");
      continue;
    }
    const std::vector<double> host_ms = di::cuda_forward_block_host_ms(*model);
    const std::vector<double> phases = di::cuda_forward_step_phase_ms(*model);
    for (size_t k = 0; k < phase_sum.size() && k < phases.size(); ++k)
      phase_sum[k] += phases[k];
    for (size_t k = 0; k < sum.size(); ++k) {
      sum[k] += ms[k];
      host_sum[k] += host_ms[k];
    }
  }
  const auto t4 = std::chrono::steady_clock::now();
  std::vector<di::bench::KernelRecord> kernels;
  if (tracer) {
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    kernels = tracer->stop();
  }
  auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("model %s, %s activations, %s linears, copy %.0f GB/s\n", dir.c_str(),
              bf16 ? "bf16" : "fp32", exact ? "exact-order" : "tensor-core", copy);
  std::printf(
      "load %.1f s; prefill %lld x %lld tokens %.3f s (%.0f tok/s); decode batch %lld, %lld "
      "steps %.2f ms/step (wall; %s)\n",
      sec(t0, t1), static_cast<long long>(batch), static_cast<long long>(prompt), sec(t1, t2),
      static_cast<double>(batch * prompt) / sec(t1, t2), static_cast<long long>(batch),
      static_cast<long long>(decode), 1e3 * sec(t3, t4) / static_cast<double>(decode),
      host_logits ? "logits to the host, argmax there" : "greedy on the GPU, ids to the host");
  const double nd = static_cast<double>(decode);
  std::printf(
      "host per decode step: %.0f us checks, %.0f us waiting for earlier GPU work, %.0f us "
      "pinned reset, %.0f us page tables, %.0f us more before block 0, %.0f us enqueuing, %.0f "
      "us waiting for the GPU, %.0f us after (results)\n",
      1e3 * phase_sum[0] / nd, 1e3 * phase_sum[1] / nd, 1e3 * phase_sum[2] / nd,
      1e3 * phase_sum[3] / nd, 1e3 * phase_sum[4] / nd, 1e3 * phase_sum[5] / nd,
      1e3 * phase_sum[6] / nd, 1e3 * phase_sum[7] / nd);
  // host us: time the host spent enqueuing the block (>= us/step: the GPU waited for it).
  std::printf("%5s %6s %8s %4s %10s %10s %10s %10s %7s\n", "block", "ratio", "mode", "eng",
              "us/step", "host us", "MB", "floor us", "x floor");
  double total_us = 0, total_floor = 0;
  std::vector<double> block_us(L);
  for (size_t b = 0; b < L; ++b) {
    const double us = 1e3 * sum[b] / static_cast<double>(decode);
    block_us[b] = us;
    const double bytes =
        wbytes[b] + static_cast<double>(batch) * kv_bytes(cfg, plan[b], prompt + decode / 2);
    const double floor_us = bytes / (copy * 1e9) * 1e6;
    total_us += us;
    total_floor += floor_us;
    std::printf("%5zu %6lld %8s %4s %10.1f %10.1f %10.1f %10.1f %7.2f\n", b,
                static_cast<long long>(plan[b].compress_ratio),
                std::string(di::attn_mode_name(plan[b].mode)).c_str(),
                plan[b].engram_slot >= 0 ? "yes" : "", us,
                1e3 * host_sum[b] / static_cast<double>(decode), bytes / 1e6, floor_us,
                us / floor_us);
  }
  const double head_us = 1e3 * sum[L] / static_cast<double>(decode);
  std::printf(
      "blocks: %.1f us/step vs floor %.1f us (%.2fx); collapse + norm + head %.1f us; "
      "batch %lld\n",
      total_us, total_floor, total_us / total_floor, head_us, static_cast<long long>(batch));
  if (ops) {
    // Per decode step; the events themselves add ~1-2 us per launch.
    print_op_table("op (decode step)", "us/step", di::cuda_forward_op_times(*model),
                   static_cast<double>(decode));
  }
  if (tracer) {
    di::bench::print_kernel_table(di::bench::summarize_kernels(kernels),
                                  static_cast<double>(decode));
    di::bench::write_kernel_csv(std::move(kernels), trace_csv);
  }
  if (o.dspark > 0) {
    // The stage rings seeded with a window of main_kv rows (their values do not change the
    // time), one warm-up step (buffers grow), then the timed steps: each is one dspark_steps call
    // over every sequence, results on the host — drafts and confidences only (what greedy
    // verification reads), then again with the logits of every draft row.
    std::vector<di::DraftRequest> requests;
    for (size_t s = 0; s < seqs.size(); ++s) {
      model->dspark_prefill(*seqs[s], std::vector<std::vector<double>>(
                                          static_cast<size_t>(cfg.sliding_window), last_taps[s]));
      requests.push_back({seqs[s].get(), next[s], &last_taps[s]});
    }
    const double bytes = dspark_step_bytes(cfg, plan, batch);
    const double floor_ms = bytes / (copy * 1e9) * 1e3;
    for (const bool logits : {false, true}) {
      for (di::DraftRequest& r : requests)
        r.logits = logits;
      (void)model->dspark_steps(requests);
      if (ops) di::cuda_forward_reset_op_times(*model);
      const auto d0 = std::chrono::steady_clock::now();
      for (int64_t k = 0; k < o.dspark; ++k)
        (void)model->dspark_steps(requests);
      const double ms =
          1e3 * sec(d0, std::chrono::steady_clock::now()) / static_cast<double>(o.dspark);
      if (ops && !logits) {
        print_op_table("op (dspark step)", "us/step", di::cuda_forward_op_times(*model),
                       static_cast<double>(o.dspark));
      }
      std::printf(
          "dspark step: %.3f ms (wall, %lld steps of %lld sequences x %lld draft rows, %lld "
          "stages; %s to the host); floor %.1f MB / %.0f GB/s = %.3f ms (%.2fx)\n",
          ms, static_cast<long long>(o.dspark), static_cast<long long>(batch),
          static_cast<long long>(cfg.dspark_block_size),
          static_cast<long long>(cfg.num_nextn_predict_layers),
          logits ? "drafts, confidences and logits" : "drafts and confidences", bytes / 1e6, copy,
          floor_ms, ms / floor_ms);
    }
  }
  int ordinal = 0;
  DI_CUDA_CHECK(cudaGetDevice(&ordinal));
  return Measured{cfg, plan, std::move(block_us), head_us, copy, di::device_info(ordinal).name};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--prompt N] [--decode N] [--batch B] [--exact | --bf16] "
                 "[--extrapolate CONFIG [--gpus G] [--expert-gbs R] [--full-experts DIR]] [--ops] "
                 "[--gpu-only] "
                 "[--host-logits] "
                 "[--kernel-trace CSV] [--dspark N] [--attention-kernel mma-sync|wgmma]\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int64_t prompt = 4096, decode = 16, batch = 1, gpus = 1;
  double expert_gbs = 0;  // 0: the copy bandwidth
  bool exact = false, bf16 = false, ops = false, gpu_only = false, host_logits = false;
  std::string extrapolate_to, trace_csv, full_experts_dir;
  bool kernel_trace = false;
  int64_t dspark = 0;
  di::AttnTensorKernel attention_kernel = di::AttnTensorKernel::kAuto;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exact") == 0) {
      exact = true;
    } else if (std::strcmp(argv[i], "--bf16") == 0) {
      bf16 = true;
    } else if (std::strcmp(argv[i], "--ops") == 0) {
      ops = true;
    } else if (std::strcmp(argv[i], "--gpu-only") == 0) {
      gpu_only = true;
    } else if (std::strcmp(argv[i], "--host-logits") == 0) {
      host_logits = true;
    } else if (std::strcmp(argv[i], "--extrapolate") == 0 && i + 1 < argc) {
      extrapolate_to = argv[++i];
    } else if (std::strcmp(argv[i], "--full-experts") == 0 && i + 1 < argc) {
      full_experts_dir = argv[++i];
    } else if (std::strcmp(argv[i], "--kernel-trace") == 0 && i + 1 < argc) {
      kernel_trace = true;
      trace_csv = argv[++i];
    } else if (std::strcmp(argv[i], "--attention-kernel") == 0 && i + 1 < argc) {
      const std::string k = argv[++i];
      if (k != "mma-sync" && k != "wgmma") {
        std::fprintf(stderr, "error: --attention-kernel mma-sync or wgmma, got %s\n", k.c_str());
        return 2;
      }
      attention_kernel =
          k == "wgmma" ? di::AttnTensorKernel::kWgmma : di::AttnTensorKernel::kMmaSync;
    } else if (std::strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) {
      prompt = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--decode") == 0 && i + 1 < argc) {
      decode = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      batch = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--gpus") == 0 && i + 1 < argc) {
      gpus = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--dspark") == 0 && i + 1 < argc) {
      dspark = std::atoll(argv[++i]);
      if (dspark < 1) {
        std::fprintf(stderr, "error: --dspark must be a number of steps >= 1, got %s\n", argv[i]);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--expert-gbs") == 0 && i + 1 < argc) {
      expert_gbs = std::atof(argv[++i]);
      if (!(expert_gbs > 0 && expert_gbs < 1e5)) {
        std::fprintf(stderr, "error: --expert-gbs must be a rate in GB/s, got %s\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "error: unknown or incomplete argument %s\n", argv[i]);
      return 2;
    }
  }
  if (prompt < 1 || decode < 1 || batch < 1 || gpus < 1 || gpus > 8) {
    std::fprintf(stderr, "error: --prompt, --decode and --batch must be >= 1, --gpus 1..8\n");
    return 2;
  }
  if ((gpus > 1 || expert_gbs > 0 || !full_experts_dir.empty()) && extrapolate_to.empty()) {
    std::fprintf(stderr,
                 "error: --gpus, --expert-gbs and --full-experts need --extrapolate CONFIG\n");
    return 2;
  }
  di::bench::backtrace_on_crash();
  try {
    RunOptions ro;
    ro.prompt = prompt;
    ro.decode = decode;
    ro.batch = batch;
    ro.exact = exact;
    ro.bf16 = bf16;
    ro.ops = ops;
    ro.gpu_only = gpu_only;
    ro.host_logits = host_logits;
    ro.dspark = dspark;
    ro.attention_kernel = attention_kernel;
    if (kernel_trace) ro.trace_csv = trace_csv;
    const Measured m = run_model(dir, ro);
    std::optional<Measured> full;
    if (!full_experts_dir.empty()) {
      // The same steps on the checkpoint that keeps every routed expert (no op table or trace).
      ro.ops = false;
      ro.trace_csv.clear();
      std::printf("\nfull-expert checkpoint for the extrapolation's expert term:\n");
      full = run_model(full_experts_dir, ro);
    }
    if (!extrapolate_to.empty() && !extrapolate(extrapolate_to, m, full ? &*full : nullptr,
                                                prompt + decode / 2, batch, gpus, expert_gbs)) {
      return 1;
    }
    return 0;
  } catch (const di::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
