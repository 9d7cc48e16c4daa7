#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace di {

std::shared_ptr<spdlog::logger> logger() {
  // Function-local static: thread-safe initialisation, one sink to stderr.
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("deepinfer");
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return instance;
}

void set_log_level(spdlog::level::level_enum level) {
  logger()->set_level(level);
}

}  // namespace di
