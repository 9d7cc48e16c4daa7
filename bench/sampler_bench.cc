// sampler_bench [--vocab N] [--iters N]
// Single-thread CPU cost of di::sample_row per row at the DeepSeek-V4 vocabulary (129,280), for
// greedy and seeded sampling configurations, on two synthetic logit rows: "peaked" (N(0, 3^2),
// a few tokens dominate, like a confident model) and "flat" (N(0, 1), thousands of plausible
// tokens). Prints one line per case: name, distribution, mean and best microseconds per row.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace {

std::vector<float> make_logits(size_t vocab, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(vocab);
  for (float& v : out)
    v = dist(gen);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  size_t vocab = 129280;
  int iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--vocab") == 0) vocab = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  }
  struct Case {
    const char* name;
    deepinfer::SamplingParams params;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, auto&& set) {
    deepinfer::SamplingParams p;
    set(p);
    cases.push_back({name, p});
  };
  add("greedy", [](auto& p) { p.temperature = 0; });
  add("greedy+penalties", [](auto& p) {
    p.temperature = 0;
    p.repetition_penalty = 1.1;
    p.frequency_penalty = 0.5;
  });
  add("sample T=1", [](auto&) {});
  add("sample T=0.6", [](auto& p) { p.temperature = 0.6; });
  add("sample top_p=0.9", [](auto& p) { p.top_p = 0.9; });
  add("sample T=0.6 top_p=0.95", [](auto& p) {
    p.temperature = 0.6;
    p.top_p = 0.95;
  });
  add("sample top_k=50", [](auto& p) { p.top_k = 50; });
  add("sample min_p=0.05", [](auto& p) { p.min_p = 0.05; });
  add("sample top_p=0.9 logprobs=5", [](auto& p) {
    p.top_p = 0.9;
    p.logprobs = 5;
  });

  const std::vector<int64_t> prompt(2000, 17), output(500, 99);
  di::SamplerScratch scratch;
  for (const auto& [dist, scale] : {std::pair{"peaked", 3.0f}, std::pair{"flat", 1.0f}}) {
    const std::vector<float> logits = make_logits(vocab, scale, 1);
    for (const Case& c : cases) {
      double total = 0, best = 1e30;
      int64_t checksum = 0;
      for (int it = 0; it < iters; ++it) {
        di::SamplerRow row;
        row.logits = logits;
        row.seed = 1234;
        row.position = it;
        row.prompt_ids = prompt;
        row.output_ids = output;
        const auto t0 = std::chrono::steady_clock::now();
        checksum += di::sample_row(c.params, row, scratch).token_id;
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count();
        total += us;
        best = std::min(best, us);
      }
      std::printf("%-30s %-6s vocab %zu: mean %8.1f us/row, best %8.1f us/row (checksum %lld)\n",
                  c.name, dist, vocab, total / iters, best, static_cast<long long>(checksum));
    }
  }
  return 0;
}
