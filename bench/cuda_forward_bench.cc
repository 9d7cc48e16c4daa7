// cuda_forward_bench MODEL_DIR [--prompt N] [--decode N] [--exact]
// The CUDA forward of a DeepSeek-V4.1 checkpoint (e.g. `deepinfer synth --config v41-flash
// --layers 4`): one prefill of N tokens, then decode steps of one token; per backbone block the
// mean GPU time of a decode step (CUDA events at block boundaries, Engram included) against the
// HBM floor of that block at batch 1: the bytes of the weights it touches (attention, mHC, router,
// top-k routed experts, shared expert, Engram wkv and staged rows) plus the KV bytes its
// attention and indexer read at this context, over the device-to-device copy bandwidth measured
// in the same run. --exact: the fp32 run's exact-order linear layers (validation speed);
// default: the FP8/FP4 tensor-core kernels.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "bench_util.h"
#include "common/error.h"
#include "config/model_config.h"
#include "engram/token_map.h"
#include "kernels/params/kv_cache.h"
#include "model/deepseek_v41/cuda_model.h"
#include "model/layer_plan.h"
#include "model/weight_catalogue.h"

namespace {

// Weight bytes block b reads at batch 1 (one token): every tensor of the block except the
// routed experts (top-k of them) and the host-resident Engram table (its staged rows instead).
std::vector<double> weight_bytes_per_block(const di::ModelConfig& cfg,
                                           const std::vector<di::LayerPlan>& plan) {
  const di::WeightCatalogue cat(cfg, plan);
  const auto L = static_cast<size_t>(cfg.num_layers);
  std::vector<double> dense(L, 0.0), experts(L, 0.0);
  for (const di::WeightSpec& w : cat.entries()) {
    if (w.block < 0 || w.block >= cfg.num_layers) continue;
    const auto b = static_cast<size_t>(w.block);
    if (w.group == di::WeightGroup::kRoutedExperts) {
      experts[b] += static_cast<double>(w.nbytes());
    } else if (w.group == di::WeightGroup::kEngram &&
               w.name.find("engram.embed.") != std::string::npos) {
      continue;  // host table: counted as staged rows below
    } else {
      dense[b] += static_cast<double>(w.nbytes());
    }
  }
  std::vector<double> out(L);
  for (size_t b = 0; b < L; ++b) {
    const di::LayerPlan& p = plan[b];
    out[b] = dense[b];
    if (p.n_routed_experts > 0) {
      out[b] += experts[b] / static_cast<double>(p.n_routed_experts) *
                static_cast<double>(p.num_experts_per_tok);
    }
    if (p.engram_slot >= 0) {
      const double hd = static_cast<double>(cfg.engram_head_dim);
      out[b] += static_cast<double>(cfg.engram_hash_columns()) * (hd + hd / 32.0);
    }
  }
  return out;
}

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--prompt N] [--decode N] [--exact]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int64_t prompt = 4096, decode = 16;
  bool exact = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exact") == 0) {
      exact = true;
    } else if (std::strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) {
      prompt = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--decode") == 0 && i + 1 < argc) {
      decode = std::atoll(argv[++i]);
    }
  }
  try {
    const di::ModelConfig cfg = di::load_model_config(dir);
    const std::vector<di::LayerPlan> plan = di::build_layer_plan(cfg);
    const std::vector<double> wbytes = weight_bytes_per_block(cfg, plan);
    di::Stream stream;
    const double copy = di::bench::copy_gbs(stream);
    di::ForwardOptions fo;
    di::CudaForwardOptions co;
    co.tensor_core_linears = !exact;
    co.time_blocks = true;
    const auto t0 = std::chrono::steady_clock::now();
    // A synthetic checkpoint has no Engram token map (the engine derives it from the tokenizer):
    // any map of the right sizes gives the same speed.
    std::optional<di::CompressedTokenMap> map;
    if (!cfg.engram_layer_ids.empty() &&
        !std::filesystem::exists(std::filesystem::path(dir) / di::kEngramTokenMapFile)) {
      std::vector<int32_t> cls(static_cast<size_t>(cfg.vocab_size));
      for (size_t i = 0; i < cls.size(); ++i)
        cls[i] = static_cast<int32_t>((i * 7919) %
                                      static_cast<size_t>(cfg.engram_compressed_vocab_size));
      map.emplace(std::move(cls), cfg.engram_compressed_vocab_size, "synthetic map (bench)");
    }
    auto model = di::load_cuda_forward_model(dir, fo, co, std::move(map));
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<int64_t> ids(static_cast<size_t>(prompt));
    for (int64_t i = 0; i < prompt; ++i)
      ids[static_cast<size_t>(i)] = (i * 7919 + 13) % model->vocab_size();
    auto st = model->new_sequence();
    di::SequenceChunk chunk{st.get(), ids};
    auto r = model->forward({&chunk, 1});
    const auto t2 = std::chrono::steady_clock::now();
    const auto L = static_cast<size_t>(cfg.num_layers);
    std::vector<double> sum(L + 1, 0.0);
    const auto t3 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < decode; ++s) {
      const auto& l = r.logits[0];
      const int64_t next = std::max_element(l.begin(), l.end()) - l.begin();
      di::SequenceChunk c{st.get(), std::span<const int64_t>(&next, 1)};
      r = model->forward({&c, 1});
      const std::vector<double> ms = di::cuda_forward_block_ms(*model);
      for (size_t k = 0; k < sum.size(); ++k)
        sum[k] += ms[k];
    }
    const auto t4 = std::chrono::steady_clock::now();
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf("model %s, %s linears, copy %.0f GB/s\n", dir.c_str(),
                exact ? "exact-order" : "tensor-core", copy);
    std::printf(
        "load %.1f s; prefill %lld tokens %.3f s (%.0f tok/s); decode %lld steps %.2f "
        "ms/step (wall)\n",
        sec(t0, t1), static_cast<long long>(prompt), sec(t1, t2),
        static_cast<double>(prompt) / sec(t1, t2), static_cast<long long>(decode),
        1e3 * sec(t3, t4) / static_cast<double>(std::max<int64_t>(decode, 1)));
    std::printf("%5s %6s %8s %4s %10s %10s %10s %7s\n", "block", "ratio", "mode", "eng", "us/step",
                "MB", "floor us", "x floor");
    double total_us = 0, total_floor = 0;
    for (size_t b = 0; b < L; ++b) {
      const double us = 1e3 * sum[b] / static_cast<double>(std::max<int64_t>(decode, 1));
      const double bytes = wbytes[b] + kv_bytes(cfg, plan[b], prompt + decode / 2);
      const double floor_us = bytes / (copy * 1e9) * 1e6;
      total_us += us;
      total_floor += floor_us;
      std::printf("%5zu %6lld %8s %4s %10.1f %10.1f %10.1f %7.2f\n", b,
                  static_cast<long long>(plan[b].compress_ratio),
                  std::string(di::attn_mode_name(plan[b].mode)).c_str(),
                  plan[b].engram_slot >= 0 ? "yes" : "", us, bytes / 1e6, floor_us, us / floor_us);
    }
    const double head_us = 1e3 * sum[L] / static_cast<double>(std::max<int64_t>(decode, 1));
    std::printf("blocks: %.1f us/step vs floor %.1f us (%.2fx); collapse + norm + head %.1f us\n",
                total_us, total_floor, total_us / total_floor, head_us);
    return 0;
  } catch (const di::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
