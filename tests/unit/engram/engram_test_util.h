#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "common/error.h"

namespace di::testing {

// The development fixture (shared/fixtures/v41-tiny-a); absent on machines without shared/.
inline std::filesystem::path engram_fixture_dir() {
  return std::filesystem::path(DI_SHARED_DIR) / "fixtures" / "v41-tiny-a";
}

inline bool engram_fixture_present() {
  return std::filesystem::exists(engram_fixture_dir() / "engram_token_map.safetensors");
}

// The message of the di::Error thrown by `fn`, or a marker when none (or another type) is thrown.
template <typename Fn>
std::string engram_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const di::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a di::Error: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline ::testing::AssertionResult has_substr(std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not found in:\n" << text;
}

}  // namespace di::testing
