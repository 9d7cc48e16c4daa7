#include "engine/stop_checker.h"

#include <algorithm>

namespace di {

StopChecker::StopChecker(std::vector<std::string> stop, bool include_stop_str_in_output)
    : stop_(std::move(stop)), include_(include_stop_str_in_output) {
  for (const std::string& s : stop_)
    max_len_ = std::max(max_len_, s.size());
}

std::optional<std::string> StopChecker::append(const std::string& text) {
  if (stopped_ || text.empty()) return std::nullopt;
  // A stop string ending inside the new text starts at most max_len - 1 bytes before it.
  const size_t old_size = text_.size();
  text_ += text;
  if (stop_.empty()) return std::nullopt;
  const size_t from = old_size >= max_len_ ? old_size - max_len_ + 1 : 0;
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stop_) {
    const size_t pos = text_.find(s, from);
    if (pos != std::string::npos && pos < best_pos) {
      best_pos = pos;
      best = &s;
    }
  }
  if (best == nullptr) return std::nullopt;
  text_.resize(include_ ? best_pos + best->size() : best_pos);
  stopped_ = true;
  return *best;
}

std::string_view StopChecker::stable_text(bool finished) const {
  std::string_view all = text_;
  if (finished || stopped_ || max_len_ <= 1) return all;
  size_t keep = all.size() >= max_len_ - 1 ? all.size() - (max_len_ - 1) : 0;
  // Do not split a UTF-8 sequence: back up over continuation bytes.
  while (keep > 0 && keep < all.size() && (static_cast<unsigned char>(all[keep]) & 0xC0) == 0x80)
    --keep;
  return all.substr(0, keep);
}

}  // namespace di
