#include "common/check.h"

namespace di::detail {

void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  std::string what = msg;
  const std::string message =
      msg.empty() && cond != nullptr ? fmt::format("check failed: {}", cond) : msg;
  if (cond != nullptr) {
    what = msg.empty() ? fmt::format("check failed: {}", cond)
                       : fmt::format("{} (check failed: {})", msg, cond);
  }
  // Strip the directory part: file:line is for developers, the message is for users.
  std::string_view f(file);
  if (auto pos = f.rfind("/src/"); pos != std::string_view::npos) f = f.substr(pos + 1);
  throw Error(fmt::format("{} [{}:{}]", what, f, line), message);
}

}  // namespace di::detail
