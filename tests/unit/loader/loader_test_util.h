#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "common/error.h"

namespace di::testing {

// A safetensors file image: 8-byte little-endian length, `header_json` verbatim, then `data`.
inline std::string make_safetensors(std::string_view header_json, std::string_view data) {
  std::string out(8, '\0');
  uint64_t n = header_json.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out.append(header_json);
  out.append(data);
  return out;
}

inline std::string make_safetensors(std::string_view header_json, size_t data_bytes) {
  return make_safetensors(header_json, std::string(data_bytes, '\x5a'));
}

inline std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The message of the di::Error thrown by `f`, or a marker when none (or another type) is thrown.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const di::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a di::Error: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline ::testing::AssertionResult contains(std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not found in:\n" << text;
}

inline ::testing::AssertionResult starts_with(std::string_view text, std::string_view prefix) {
  if (text.starts_with(prefix)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "does not start with '" << prefix << "':\n" << text;
}

}  // namespace di::testing
