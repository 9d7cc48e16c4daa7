#pragma once

// Paths of the shared golden fixtures used by several test files (DI_SHARED_DIR is set for every
// test target by di_add_test).

#include <filesystem>

namespace di::testing_support {

// The V4.1 tiny model with its reference traces (../shared/fixtures/v41-tiny-a).
inline const std::filesystem::path kTinyFixtureA =
    std::filesystem::path(DI_SHARED_DIR) / "fixtures" / "v41-tiny-a";

}  // namespace di::testing_support
