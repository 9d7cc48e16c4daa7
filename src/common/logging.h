#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace di {

// The process logger: stderr only (stdout carries results). Created on first use; the level can
// be changed by the CLI (--log-level) or DI_LOG_LEVEL read once in tools/, never deep inside.
std::shared_ptr<spdlog::logger> logger();
void set_log_level(spdlog::level::level_enum level);

}  // namespace di

#define DI_LOG_DEBUG(...) ::di::logger()->debug(__VA_ARGS__)
#define DI_LOG_INFO(...) ::di::logger()->info(__VA_ARGS__)
#define DI_LOG_WARN(...) ::di::logger()->warn(__VA_ARGS__)
#define DI_LOG_ERROR(...) ::di::logger()->error(__VA_ARGS__)
