// tokenizer_bench TOKENIZER_JSON CORPUS_FILE [--repeat N]
// Single-thread encode throughput of di::Tokenizer on a corpus of strings. The corpus file is a
// sequence of records `u32 little-endian byte length` + UTF-8 bytes (bench/tokenizer_vs_hf.py
// writes it and runs Hugging Face `tokenizers` on the same strings in the same run). Prints one
// JSON line: bytes, strings, tokens, best seconds, MB/s, tokens/s, and an FNV-1a hash of all ids
// so the caller can check both tokenizers produced the same ids.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> read_corpus(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot open corpus ") + path);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < data.size()) {
    if (data.size() - pos < 4) throw std::runtime_error("truncated corpus record header");
    uint32_t n = 0;
    std::memcpy(&n, data.data() + pos, 4);
    pos += 4;
    if (n > data.size() - pos) throw std::runtime_error("truncated corpus record");
    out.emplace_back(data.substr(pos, n));
    pos += n;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS_FILE [--repeat N]\n", argv[0]);
    return 2;
  }
  int repeat = 3;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = std::atoi(argv[++i]);
  }
  try {
    const di::Tokenizer tok = di::Tokenizer::load(argv[1]);
    const std::vector<std::string> corpus = read_corpus(argv[2]);
    size_t bytes = 0;
    for (const std::string& s : corpus)
      bytes += s.size();
    double best = 1e30;
    uint64_t tokens = 0, hash = 0;
    for (int r = 0; r < repeat; ++r) {
      uint64_t h = 1469598103934665603ull;
      uint64_t count = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const std::string& s : corpus) {
        const std::vector<int32_t> ids = tok.encode(s, /*parse_special_tokens=*/true);
        count += ids.size();
        for (int32_t id : ids)
          h = (h ^ static_cast<uint32_t>(id)) * 1099511628211ull;
        h = (h ^ 0xffffffffu) * 1099511628211ull;  // string separator
      }
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (sec < best) best = sec;
      tokens = count;
      hash = h;
    }
    std::printf(
        "{\"impl\": \"deepinfer\", \"strings\": %zu, \"bytes\": %zu, \"tokens\": %llu, "
        "\"seconds\": %.6f, \"mb_per_s\": %.3f, \"tokens_per_s\": %.0f, \"ids_fnv1a\": "
        "\"%016llx\"}\n",
        corpus.size(), bytes, static_cast<unsigned long long>(tokens), best,
        static_cast<double>(bytes) / best / 1e6, static_cast<double>(tokens) / best,
        static_cast<unsigned long long>(hash));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
