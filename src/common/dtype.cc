#include "common/dtype.h"

#include <array>

namespace di {
namespace {

constexpr std::array<std::pair<DType, std::string_view>, kNumDTypes> kNames{{
    {DType::kBF16, "BF16"},
    {DType::kF16, "F16"},
    {DType::kF32, "F32"},
    {DType::kF64, "F64"},
    {DType::kI8, "I8"},
    {DType::kI16, "I16"},
    {DType::kI32, "I32"},
    {DType::kI64, "I64"},
    {DType::kU8, "U8"},
    {DType::kBool, "BOOL"},
    {DType::kF8E4M3, "F8_E4M3"},
    {DType::kF8E8M0, "F8_E8M0"},
}};

}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& [d, n] : kNames) {
    if (d == t) return n;
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view tag) {
  for (const auto& [d, n] : kNames) {
    if (n == tag) return d;
  }
  return std::nullopt;
}

}  // namespace di
