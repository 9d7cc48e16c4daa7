#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace di {

// Storage dtypes as tagged in safetensors headers. FP4 (e2m1) weights are stored as I8 bytes
// holding two nibbles (low nibble = even element); they have no tag of their own.
enum class DType : uint8_t {
  kBF16,
  kF16,
  kF32,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kBool,
  kF8E4M3,  // e4m3fn: bias 7, max 448, no inf, 0x7F/0xFF NaN
  kF8E8M0,  // ue8m0 scale byte: 2^(b-127), 0xFF = NaN
};

inline constexpr int kNumDTypes = 12;

// Size in bytes of one stored element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kI16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E8M0:
      return 1;
  }
  return 0;
}

// The safetensors tag ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors tag; nullopt for tags this engine does not accept.
std::optional<DType> parse_dtype(std::string_view tag);

}  // namespace di
