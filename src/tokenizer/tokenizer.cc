#include "tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"
#include "tokenizer/utf8.h"

namespace di {
namespace {

using Json = nlohmann::json;
using tokenizer::AddedToken;

const Json& member(const Json& object, std::string_view key, std::string_view where,
                   std::string_view label) {
  auto it = object.find(key);
  DI_CHECK(it != object.end(), "{}: {} has no '{}'", label, where, key);
  return *it;
}

// Collects the Split patterns of the pre-tokenizer and checks the parts we do not model are in
// the configuration DeepSeek ships.
std::vector<std::string> split_patterns(const Json& pre, std::string_view label) {
  DI_CHECK(pre.is_object() && pre.value("type", "") == "Sequence",
           "{}: pre_tokenizer must be a Sequence", label);
  std::vector<std::string> patterns;
  bool byte_level_seen = false;
  for (const Json& step : member(pre, "pretokenizers", "pre_tokenizer", label)) {
    const std::string type = step.value("type", "");
    if (type == "Split") {
      DI_CHECK(!byte_level_seen, "{}: a Split after ByteLevel is not supported", label);
      DI_CHECK(step.value("behavior", "") == "Isolated" && !step.value("invert", false),
               "{}: only Split(behavior=Isolated, invert=false) is supported", label);
      const Json& pattern = member(step, "pattern", "Split", label);
      DI_CHECK(pattern.contains("Regex"), "{}: only Regex split patterns are supported", label);
      patterns.push_back(pattern["Regex"].get<std::string>());
    } else if (type == "ByteLevel") {
      DI_CHECK(!step.value("add_prefix_space", false) && !step.value("use_regex", true),
               "{}: ByteLevel must have add_prefix_space=false and use_regex=false", label);
      byte_level_seen = true;
    } else {
      DI_FAIL("{}: unsupported pre-tokenizer step '{}'", label, type);
    }
  }
  DI_CHECK(byte_level_seen, "{}: pre_tokenizer lacks the ByteLevel step", label);
  return patterns;
}

void check_normalizer(const Json& normalizer, std::string_view label) {
  if (normalizer.is_null()) return;
  const bool empty_sequence = normalizer.value("type", "") == "Sequence" &&
                              normalizer.value("normalizers", Json::array()).empty();
  DI_CHECK(empty_sequence, "{}: only an empty normalizer is supported", label);
}

std::vector<std::pair<std::string, std::string>> parse_merges(const Json& merges,
                                                              std::string_view label) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const Json& merge : merges) {
    if (merge.is_string()) {  // legacy "left right"
      const auto& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      DI_CHECK(space != std::string::npos && space > 0 && space + 1 < text.size(),
               "{}: malformed merge '{}'", label, text);
      out.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else {
      DI_CHECK(merge.is_array() && merge.size() == 2, "{}: malformed merge {}", label,
               merge.dump());
      out.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    }
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& tokenizer_json) {
  std::ifstream in(tokenizer_json, std::ios::binary);
  DI_CHECK(in.good(), "cannot open tokenizer file {}", tokenizer_json.string());
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), tokenizer_json.string());
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view label) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    DI_FAIL("{}: malformed JSON: {}", label, e.what());
  }
  try {
    check_normalizer(root.value("normalizer", Json()), label);
    const Json& model = member(root, "model", "tokenizer.json", label);
    DI_CHECK(model.value("type", "") == "BPE", "{}: model must be BPE", label);
    DI_CHECK(!model.value("byte_fallback", false), "{}: BPE byte_fallback is not supported", label);
    DI_CHECK(!model.value("ignore_merges", false), "{}: BPE ignore_merges is not supported", label);
    DI_CHECK(model.value("continuing_subword_prefix", Json()).is_null() &&
                 model.value("end_of_word_suffix", Json()).is_null(),
             "{}: BPE subword prefixes/suffixes are not supported", label);
    const Json& decoder = member(root, "decoder", "tokenizer.json", label);
    DI_CHECK(decoder.value("type", "") == "ByteLevel", "{}: decoder must be ByteLevel", label);

    Tokenizer tok;
    const tokenizer::ByteLevelAlphabet alphabet;
    // Base vocab.
    const Json& vocab = member(model, "vocab", "model", label);
    std::vector<std::string> spellings;
    for (const auto& [spelling, id_json] : vocab.items()) {
      const auto id = id_json.get<int64_t>();
      DI_CHECK(id >= 0 && id < (int64_t{1} << 24), "{}: vocab id {} out of range", label, id);
      if (static_cast<size_t>(id) >= spellings.size()) spellings.resize(id + 1);
      spellings[id] = spelling;
      if (static_cast<size_t>(id) >= tok.tokens_.size()) tok.tokens_.resize(id + 1);
      TokenInfo& info = tok.tokens_[id];
      info.spelling = spelling;
      info.exists = true;
      tok.id_of_[spelling] = static_cast<int32_t>(id);
    }
    std::array<int32_t, 256> byte_ids{};
    for (int b = 0; b < 256; ++b) {
      auto it = tok.id_of_.find(std::string(alphabet.char_of(static_cast<uint8_t>(b))));
      DI_CHECK(it != tok.id_of_.end(), "{}: vocab lacks the token for byte {}", label, b);
      byte_ids[b] = it->second;
    }
    tok.bpe_ = std::make_unique<tokenizer::BpeModel>(
        spellings, parse_merges(member(model, "merges", "model", label), label), byte_ids);

    // Added tokens override or extend the vocab.
    std::vector<AddedToken> added;
    for (const Json& t : root.value("added_tokens", Json::array())) {
      AddedToken token{t.at("id").get<int32_t>(), t.at("content").get<std::string>(),
                       t.value("special", false), t.value("normalized", false)};
      DI_CHECK(token.id >= 0 && token.id < (1 << 24), "{}: added token id {} out of range", label,
               token.id);
      DI_CHECK(
          !t.value("lstrip", false) && !t.value("rstrip", false) && !t.value("single_word", false),
          "{}: added token '{}': lstrip/rstrip/single_word are not supported", label,
          token.content);
      if (static_cast<size_t>(token.id) >= tok.tokens_.size()) tok.tokens_.resize(token.id + 1);
      TokenInfo& info = tok.tokens_[token.id];
      info.spelling = token.content;
      info.exists = true;
      tok.id_of_[token.content] = token.id;
      added.push_back(std::move(token));
    }
    // HF skips by spelling: any id whose spelling is a special token's content is special.
    for (const AddedToken& token : added) {
      if (!token.special) continue;
      for (auto& info : tok.tokens_) {
        if (info.exists && info.spelling == token.content) info.special = true;
      }
    }
    for (auto& info : tok.tokens_) {
      if (!info.exists) continue;
      auto bytes = alphabet.token_bytes(info.spelling);
      info.bytes = bytes ? std::move(*bytes) : info.spelling;
    }
    tok.added_ = std::make_unique<tokenizer::AddedVocabulary>(added);
    tok.pre_tokenizer_ = std::make_unique<tokenizer::PreTokenizer>(
        split_patterns(member(root, "pre_tokenizer", "tokenizer.json", label), label));
    return tok;
  } catch (const Json::exception& e) {
    DI_FAIL("{}: unexpected tokenizer.json structure: {}", label, e.what());
  }
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  const std::vector<size_t> ends = pre_tokenizer_->split(text);
  size_t begin = 0;
  for (size_t end : ends) {
    bpe_->encode_word(text.substr(begin, end - begin), out);
    begin = end;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special_tokens) const {
  // PCRE2 runs with PCRE2_NO_UTF_CHECK, so the text must be valid UTF-8 before it sees it.
  std::string sanitized;
  std::string_view valid = text;
  if (!tokenizer::utf8_valid(text)) {
    sanitized = tokenizer::utf8_lossy(text);
    valid = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(valid.size() / 3 + 1);
  for (const tokenizer::Segment& seg : added_->split(valid, parse_special_tokens)) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
    } else {
      encode_text(valid.substr(seg.begin, seg.end - seg.begin), ids);
    }
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !tokens_[id].exists) continue;
    const TokenInfo& info = tokens_[id];
    if (skip_special_tokens && info.special) continue;
    bytes.append(info.bytes);
  }
  return tokenizer::utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = id_of_.find(std::string(token));
  if (it == id_of_.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return {};
  return tokens_[id].spelling;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < tokens_.size() && tokens_[id].special;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return {};
  return tokens_[id].bytes;
}

}  // namespace di
