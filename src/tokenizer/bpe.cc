#include "tokenizer/bpe.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "common/check.h"

namespace di::tokenizer {
namespace {

struct Symbol {
  int32_t id;
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
  bool live;
};

struct Candidate {
  int32_t rank;
  int32_t left;  // symbol index of the pair's left side
  int32_t merged_id;
  int32_t left_id;  // the pair's ids when it was pushed (fast validity check)
  int32_t right_id;
  // The max-heap pops the greatest: lowest rank first, then leftmost.
  bool operator<(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

BpeModel::BpeModel(const std::vector<std::string>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   const std::array<int32_t, 256>& byte_token_ids)
    : byte_token_ids_(byte_token_ids) {
  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (!vocab[id].empty()) id_of.emplace(vocab[id], static_cast<int32_t>(id));
  }
  size_t capacity = 16;
  shift_ = 60;
  while (capacity < 2 * merges.size() + 1) {
    capacity *= 2;
    --shift_;
  }
  slots_.assign(capacity, Slot{kEmpty, Merge{0, 0}});
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = id_of.find(left);
    auto r = id_of.find(right);
    joined.assign(left).append(right);
    auto m = id_of.find(joined);
    DI_CHECK(l != id_of.end() && r != id_of.end() && m != id_of.end(),
             "BPE merge {} '{} {}' names a token missing from the vocab", rank, left, right);
    // A repeated pair keeps its first (lowest) rank.
    const uint64_t key = pair_key(l->second, r->second);
    for (size_t i = slot_of(key);; i = (i + 1) & (capacity - 1)) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == kEmpty) {
        slots_[i] = Slot{key, Merge{static_cast<int32_t>(rank), m->second}};
        break;
      }
    }
  }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(key);; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.key == key) return &slot.merge;
    if (slot.key == kEmpty) return nullptr;
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_token_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  const auto n = static_cast<int32_t>(word.size());
  // Per-thread scratch: encode is called once per pre-tokenized piece, so allocation would
  // dominate short words. Thread-local keeps concurrent encodes independent.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.resize(word.size());
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_token_ids_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
                  true};
  }
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const Merge* m = find_merge(symbols[left].id, symbols[right].id)) {
      heap.push_back({m->rank, left, m->merged_id, symbols[left].id, symbols[right].id});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.left];
    // Stale entries: the left symbol was absorbed, or the pair now there merges into something
    // else. (Like HF, a pair that changed but merges into the same token is still taken.)
    if (!left.live || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (left.id != c.left_id || right.id != c.right_id) {
      const Merge* current = find_merge(left.id, right.id);
      if (current == nullptr || current->merged_id != c.merged_id) continue;
    }
    left.id = c.merged_id;
    right.live = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next)
    out.push_back(symbols[i].id);
}

}  // namespace di::tokenizer
