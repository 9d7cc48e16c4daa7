#include "tokenizer/added_vocabulary.h"

#include <algorithm>

namespace di::tokenizer {

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  int32_t node = 0;
  for (char ch : key) {
    const auto byte = static_cast<uint8_t>(ch);
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, uint8_t b) { return child.first < b; });
    if (it != children.end() && it->first == byte) {
      node = it->second;
      continue;
    }
    const auto next = static_cast<int32_t>(nodes_.size());
    children.insert(it, {byte, next});
    nodes_.emplace_back();
    node = next;
  }
  if (nodes_[node].token < 0) nodes_[node].token = token;  // first definition wins
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest(std::string_view text, size_t pos,
                                                          const std::vector<AddedToken>& tokens,
                                                          bool include_special) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, uint8_t b) { return child.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    const int32_t token = nodes_[node].token;
    if (token >= 0 && (include_special || !tokens[token].special)) best = {token, i + 1 - pos};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    (tokens_[i].normalized ? normalized_trie_ : raw_trie_)
        .insert(tokens_[i].content, static_cast<int32_t>(i));
  }
}

void AddedVocabulary::split_pass(const Trie& trie, std::string_view text, bool include_special,
                                 std::vector<Segment>& segments) const {
  std::vector<Segment> out;
  out.reserve(segments.size());
  for (const Segment& seg : segments) {
    if (seg.added_id >= 0) {
      out.push_back(seg);
      continue;
    }
    size_t text_begin = seg.begin;
    size_t pos = seg.begin;
    const std::string_view piece = text.substr(0, seg.end);
    while (pos < seg.end) {
      const auto [token, length] = trie.longest(piece, pos, tokens_, include_special);
      if (token < 0) {
        ++pos;
        continue;
      }
      if (pos > text_begin) out.push_back({-1, text_begin, pos});
      out.push_back({tokens_[token].id, pos, pos + length});
      pos += length;
      text_begin = pos;
    }
    if (seg.end > text_begin) out.push_back({-1, text_begin, seg.end});
  }
  segments.swap(out);
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool include_special) const {
  std::vector<Segment> segments{{-1, 0, text.size()}};
  if (text.empty()) return {};
  split_pass(raw_trie_, text, include_special, segments);
  split_pass(normalized_trie_, text, include_special, segments);
  return segments;
}

}  // namespace di::tokenizer
