#pragma once

// Runs the deepinfer CLI (DI_CLI_PATH) as a child process for end-to-end tests.

#include <filesystem>
#include <string>

namespace di::testing {

struct RunResult {
  int code = -1;  // exit status; 1000 + signal number when the process crashed
  std::string out;
  std::string err;
};

// Runs `<cli> args` with stdout/stderr captured through files in `dir`.
RunResult run_cli(const std::string& cli, const std::string& args,
                  const std::filesystem::path& dir);

}  // namespace di::testing
