// Parity with Hugging Face `tokenizers` on generated corpora (tests/tokenizer_tools/make_golden.py
// writes them): golden_v3.bin (20,000 strings, the V3 tokenizer in ../shared/data) and
// golden_v41.bin (4,000 strings with every added-token spelling, the bundled V4.1 tokenizer).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace di {
namespace {

struct EncodeCase {
  bool parse_special;
  std::string text;
  std::vector<int32_t> ids;
};

struct DecodeCase {
  bool skip_special;
  std::vector<int32_t> ids;
  std::string text;
};

struct Golden {
  std::vector<EncodeCase> encodes;
  std::vector<DecodeCase> decodes;
};

class Reader {
 public:
  explicit Reader(std::string data) : data_(std::move(data)) {}

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      if (pos_ >= data_.size() || shift > 63) throw std::runtime_error("truncated golden file");
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
  }
  std::string bytes() {
    const uint64_t n = varint();
    if (n > data_.size() - pos_) throw std::runtime_error("truncated golden file");
    std::string out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::vector<int32_t> ids() {
    std::vector<int32_t> out(varint());
    for (auto& id : out)
      id = static_cast<int32_t>(varint());
    return out;
  }
  bool expect(std::string_view magic) {
    if (data_.compare(pos_, magic.size(), magic) != 0) return false;
    pos_ += magic.size();
    return true;
  }

 private:
  std::string data_;
  size_t pos_ = 0;
};

Golden read_golden(const std::string& path) {
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::ostringstream buf;
    buf << in.rdbuf();
    Reader r(buf.str());
    Golden out;
    if (!r.expect("DITOKGV1")) throw std::runtime_error("bad golden magic");
    out.encodes.resize(r.varint());
    for (auto& c : out.encodes) {
      c.parse_special = (r.varint() & 1) != 0;
      c.text = r.bytes();
      c.ids = r.ids();
    }
    out.decodes.resize(r.varint());
    for (auto& c : out.decodes) {
      c.skip_special = (r.varint() & 1) != 0;
      c.ids = r.ids();
      c.text = r.bytes();
    }
    return out;
  }
}

struct CorpusParam {
  const char* name;
  const char* tokenizer_json;
  const char* golden;
  size_t min_encodes;
};

const CorpusParam kCorpora[] = {
    {"v3", DI_SHARED_DIR "/data/tokenizer-deepseek-v3/tokenizer.json",
     DI_SOURCE_DIR "/tests/data/tokenizer/golden_v3.bin", 20000},
    {"v41_bundled", DI_SOURCE_DIR "/data/tokenizer/deepseek-v41/tokenizer.json",
     DI_SOURCE_DIR "/tests/data/tokenizer/golden_v41.bin", 4000},
};

class TokenizerCorpus : public ::testing::TestWithParam<CorpusParam> {
 protected:
  void SetUp() override {
    const CorpusParam& p = GetParam();
    if (!std::filesystem::exists(p.tokenizer_json)) GTEST_SKIP() << "missing " << p.tokenizer_json;
    static std::map<std::string, std::pair<std::unique_ptr<Tokenizer>, Golden>> cache;
    auto it = cache.find(p.name);
    if (it == cache.end()) {
      it = cache
               .emplace(p.name, std::make_pair(
                                    std::make_unique<Tokenizer>(Tokenizer::load(p.tokenizer_json)),
                                    read_golden(p.golden)))
               .first;
    }
    tok_ = it->second.first.get();
    golden_ = &it->second.second;
  }
  const Golden& golden() const { return *golden_; }
  const Tokenizer* tok_ = nullptr;
  const Golden* golden_ = nullptr;
};

TEST_P(TokenizerCorpus, EncodeMatchesHuggingFace) {
  const Tokenizer* tok = tok_;
  const Golden& g = golden();
  ASSERT_GE(g.encodes.size(), GetParam().min_encodes);
  size_t identical = 0;
  size_t reported = 0;
  size_t bytes = 0;
  double seconds = 0;
  for (const EncodeCase& c : g.encodes) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok->encode(c.text, c.parse_special);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bytes += c.text.size();
    if (ids == c.ids) {
      ++identical;
    } else if (reported++ < 10) {
      ADD_FAILURE() << "ids differ (parse_special=" << c.parse_special << ") for text of "
                    << c.text.size() << " bytes: '" << c.text.substr(0, 200) << "'";
    }
  }
  EXPECT_EQ(identical, g.encodes.size());
  std::cerr << "[corpus] " << identical << " / " << g.encodes.size()
            << " encodings identical to HF tokenizers; single-thread encode "
            << static_cast<double>(bytes) / 1e6 / seconds << " MB/s over " << bytes << " bytes\n";
}

TEST_P(TokenizerCorpus, DecodeMatchesHuggingFace) {
  const Tokenizer* tok = tok_;
  const Golden& g = golden();
  ASSERT_GT(g.decodes.size(), 0u);
  size_t identical = 0;
  for (const DecodeCase& c : g.decodes) {
    const std::string text = tok->decode(c.ids, c.skip_special);
    if (text == c.text) {
      ++identical;
    } else {
      ADD_FAILURE() << "decode differs (skip=" << c.skip_special << "): got '" << text << "' want '"
                    << c.text << "'";
    }
  }
  EXPECT_EQ(identical, g.decodes.size());
}

TEST_P(TokenizerCorpus, DecodeRoundTrips) {
  const Tokenizer* tok = tok_;
  for (const EncodeCase& c : golden().encodes) {
    ASSERT_EQ(tok->decode(c.ids, /*skip_special_tokens=*/false), c.text);
  }
}

// Emitted text is valid UTF-8 after every token, and what was emitted plus a flush equals the
// full decode of the prefix at every split point.
void check_streaming(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer stream(tok, skip_special);
  std::string emitted;
  for (size_t k = 0; k < ids.size(); ++k) {
    IncrementalDetokenizer flushed = stream;
    const std::string prefix_ids_decode = tok.decode(std::span(ids).first(k), skip_special);
    ASSERT_EQ(emitted + flushed.finish(), prefix_ids_decode) << "split at " << k;
    const std::string piece = stream.push(ids[k]);
    ASSERT_EQ(
        tok.decode(std::span(ids).first(k + 1), skip_special).compare(0, emitted.size(), emitted),
        0);
    emitted += piece;
  }
  emitted += stream.finish();
  ASSERT_EQ(emitted, tok.decode(ids, skip_special));
}

TEST_P(TokenizerCorpus, StreamingEqualsFullDecodeAtEverySplit) {
  const Tokenizer* tok = tok_;
  for (const EncodeCase& c : golden().encodes) {
    if (c.ids.size() > 300) continue;  // the per-split check is quadratic; long words are below
    check_streaming(*tok, c.ids, false);
    if (HasFatalFailure()) return;
  }
  for (const DecodeCase& c : golden().decodes) {
    check_streaming(*tok, c.ids, c.skip_special);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, TokenizerCorpus, ::testing::ValuesIn(kCorpora),
                         [](const ::testing::TestParamInfo<CorpusParam>& param_info) {
                           return std::string(param_info.param.name);
                         });

}  // namespace
}  // namespace di
