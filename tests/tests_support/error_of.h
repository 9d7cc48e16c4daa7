#pragma once

// The message of the di::Error a call throws; a test failure (and "") when it throws none.

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "common/error.h"

namespace di::test {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a di::Error";
  return {};
}

}  // namespace di::test
