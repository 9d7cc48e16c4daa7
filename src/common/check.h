#pragma once

#include <fmt/format.h>

#include <string>

#include "common/error.h"

namespace di::detail {

[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond,
                                      const std::string& msg);

}  // namespace di::detail

// DI_CHECK(cond, "format {}", args...): throws di::Error with file:line and the formatted
// message when cond is false. The message is only formatted on failure.
#define DI_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::di::detail::throw_check_failure(__FILE__, __LINE__, #cond,                        \
                                        ::di::detail::format_check_message(__VA_ARGS__)); \
    }                                                                                     \
  } while (0)

// DI_FAIL("format {}", args...): unconditional failure with the same formatting.
#define DI_FAIL(...) \
  ::di::detail::throw_check_failure(__FILE__, __LINE__, nullptr, fmt::format(__VA_ARGS__))

namespace di::detail {

inline std::string format_check_message() {
  return {};
}

template <typename... Args>
std::string format_check_message(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}

}  // namespace di::detail
