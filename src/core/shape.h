#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace di {

// A tensor shape: row-major, outermost dimension first. Empty = scalar (one element).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // Product of the dimensions; returns -1 on int64 overflow (caller treats it as invalid).
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) {
      if (d < 0) return -1;
      if (d != 0 && n > INT64_MAX / d) return -1;
      n *= d;
    }
    return n;
  }
  std::string to_string() const { return fmt::format("[{}]", fmt::join(dims_, ", ")); }
  bool operator==(const Shape& o) const = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace di

template <>
struct fmt::formatter<di::Shape> : fmt::formatter<std::string> {
  auto format(const di::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.to_string(), ctx);
  }
};
