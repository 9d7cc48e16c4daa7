// cpu_forward_bench MODEL_DIR [--precision fp32|fp64] [--prompt N] [--decode N] [--repeat R]
// CPU reference forward throughput: one prefill of N tokens, then N decode steps, on a
// DeepSeek-V4.1 checkpoint (the fixture, or a real-dimension synthetic one from `deepinfer synth`).
// Prints tokens/s and the weight bytes the backbone touches per decode token.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/deepseek_v41/cpu_model.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--precision fp32|fp64] [--prompt N] [--decode N]\n",
                 argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  di::ForwardOptions opts;
  int64_t prompt = 64, decode = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--precision") == 0) {
      opts.precision =
          std::strcmp(argv[i + 1], "fp64") == 0 ? di::Precision::kFp64 : di::Precision::kFp32;
    } else if (std::strcmp(argv[i], "--prompt") == 0) {
      prompt = std::atoll(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--decode") == 0) {
      decode = std::atoll(argv[i + 1]);
    }
  }
  try {
    auto t0 = std::chrono::steady_clock::now();
    auto model = di::load_cpu_forward_model(dir, opts);
    auto t1 = std::chrono::steady_clock::now();
    std::vector<int64_t> ids(static_cast<size_t>(prompt));
    for (int64_t i = 0; i < prompt; ++i)
      ids[static_cast<size_t>(i)] = (i * 7919 + 13) % model->vocab_size();
    auto st = model->new_sequence();
    di::SequenceChunk chunk{st.get(), ids};
    auto r = model->forward({&chunk, 1});
    auto t2 = std::chrono::steady_clock::now();
    int64_t next = 1;
    for (int64_t s = 0; s < decode; ++s) {
      const auto& l = r.logits[0];
      next = std::max_element(l.begin(), l.end()) - l.begin();
      di::SequenceChunk c{st.get(), std::span<const int64_t>(&next, 1)};
      r = model->forward({&c, 1});
    }
    auto t3 = std::chrono::steady_clock::now();
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf("model: %s  precision: %s\n", dir.c_str(),
                opts.precision == di::Precision::kFp64 ? "fp64" : "fp32");
    std::printf("load: %.2f s\n", sec(t0, t1));
    std::printf("prefill: %lld tokens in %.3f s = %.2f tok/s\n", static_cast<long long>(prompt),
                sec(t1, t2), static_cast<double>(prompt) / sec(t1, t2));
    if (decode > 0) {
      std::printf("decode: %lld steps in %.3f s = %.2f tok/s (%.1f ms/token)\n",
                  static_cast<long long>(decode), sec(t2, t3),
                  static_cast<double>(decode) / sec(t2, t3),
                  1e3 * sec(t2, t3) / static_cast<double>(decode));
    }
    return 0;
  } catch (const di::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
