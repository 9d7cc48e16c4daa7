// deepinfer bench throughput | latency: vLLM-style offline benchmarks on random token prompts.
//   throughput: "Throughput: X requests/s, Y total tokens/s, Z output tokens/s"
//   latency:    "Avg latency: X seconds" and the 10/25/50/75/90/99 percentiles

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.h"
#include "common/check.h"
#include "deepinfer/llm.h"
#include "engine/llm_impl.h"
#include "engine_options.h"

namespace di::cli {
namespace {

struct BenchArgs {
  EngineFlags engine;
  int64_t input_len = 128;
  int64_t output_len = 32;
  int64_t num_prompts = 16;
  int64_t batch_size = 8;
  int64_t num_iters = 5;
  int64_t num_iters_warmup = 1;
  std::string output_json;
};

std::vector<deepinfer::Prompt> random_prompts(int64_t n, int64_t len, int64_t vocab,
                                              uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<deepinfer::Prompt> out;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> ids(static_cast<size_t>(len));
    // Ordinary BPE ids (below the added tokens), never BOS/EOS/pad.
    for (auto& id : ids)
      id = 3 + static_cast<int64_t>(rng() %
                                    static_cast<uint64_t>(std::min<int64_t>(vocab, 128000) - 3));
    out.emplace_back(std::move(ids));
  }
  return out;
}

deepinfer::SamplingParams fixed_length(int64_t output_len) {
  deepinfer::SamplingParams sp;
  sp.temperature = 1.0;
  sp.seed = 0;
  sp.ignore_eos = true;
  sp.max_tokens = output_len;
  return sp;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  DI_CHECK(out.good(), "cannot write {}", path);
  out << j.dump(2) << "\n";
}

int run_throughput(BenchArgs& a) {
  deepinfer::LLM llm(a.engine.model, engine_config(a.engine));
  const int64_t vocab = llm.impl().model_config().vocab_size;
  const auto prompts = random_prompts(a.num_prompts, a.input_len, vocab, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const auto outs = llm.generate(prompts, fixed_length(a.output_len));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t in_tok = 0, out_tok = 0;
  for (const auto& o : outs) {
    DI_CHECK(o.error.empty(), "request {} failed: {}", o.request_id, o.error);
    in_tok += static_cast<int64_t>(o.prompt_token_ids.size());
    out_tok += static_cast<int64_t>(o.outputs[0].token_ids.size());
  }
  const double n = static_cast<double>(outs.size());
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", n / secs,
              static_cast<double>(in_tok + out_tok) / secs, static_cast<double>(out_tok) / secs);
  std::printf("Total num prompt tokens:  %ld\n", static_cast<long>(in_tok));
  std::printf("Total num output tokens:  %ld\n", static_cast<long>(out_tok));
  write_json(a.output_json, {{"elapsed_time", secs},
                             {"num_requests", outs.size()},
                             {"total_num_tokens", in_tok + out_tok},
                             {"requests_per_second", n / secs},
                             {"tokens_per_second", static_cast<double>(in_tok + out_tok) / secs}});
  return 0;
}

int run_latency(BenchArgs& a) {
  deepinfer::LLM llm(a.engine.model, engine_config(a.engine));
  const int64_t vocab = llm.impl().model_config().vocab_size;
  const auto prompts = random_prompts(a.batch_size, a.input_len, vocab, 1);
  const auto sp = fixed_length(a.output_len);
  std::vector<double> lat;
  for (int64_t i = 0; i < a.num_iters_warmup + a.num_iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto outs = llm.generate(prompts, sp);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& o : outs)
      DI_CHECK(o.error.empty(), "request failed: {}", o.error);
    if (i >= a.num_iters_warmup) lat.push_back(s);
  }
  double avg = 0;
  for (double v : lat)
    avg += v;
  avg /= static_cast<double>(lat.size());
  std::printf("Avg latency: %.6f seconds\n", avg);
  std::vector<double> sorted = lat;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::json pct;
  for (int p : {10, 25, 50, 75, 90, 99}) {
    // numpy.percentile's linear interpolation, as vLLM uses.
    const double pos = static_cast<double>(p) / 100.0 * static_cast<double>(sorted.size() - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    const double v = sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
    std::printf("%d%% percentile latency: %.6f seconds\n", p, v);
    pct[std::to_string(p)] = v;
  }
  write_json(a.output_json, {{"avg_latency", avg}, {"latencies", lat}, {"percentiles", pct}});
  return 0;
}

}  // namespace

Command add_bench(CLI::App& root) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* app = root.add_subcommand("bench", "offline benchmarks (vLLM-style output)");
  app->require_subcommand(1);
  CLI::App* tp = app->add_subcommand("throughput", "requests/s and tokens/s of a batch");
  CLI::App* lat = app->add_subcommand("latency", "end-to-end latency of one batch");
  for (CLI::App* sub : {tp, lat}) {
    add_engine_flags(*sub, args->engine);
    sub->add_option("--input-len", args->input_len)
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    sub->add_option("--output-len", args->output_len)
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    sub->add_option("--output-json", args->output_json, "write the results as JSON");
  }
  tp->add_option("--num-prompts", args->num_prompts)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  lat->add_option("--batch-size", args->batch_size)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  lat->add_option("--num-iters", args->num_iters)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  lat->add_option("--num-iters-warmup", args->num_iters_warmup)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return {app, [args, tp] { return tp->parsed() ? run_throughput(*args) : run_latency(*args); }};
}

}  // namespace di::cli
