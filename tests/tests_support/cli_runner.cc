#include "tests_support/cli_runner.h"

#include <sys/wait.h>

#include <cstdlib>

#include "tests_support/temp_dir.h"

namespace di::testing {

RunResult run_cli(const std::string& cli, const std::string& args,
                  const std::filesystem::path& dir) {
  const std::filesystem::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  std::string cmd = cli;
  cmd.append(" ")
      .append(args)
      .append(" > ")
      .append(out.string())
      .append(" 2> ")
      .append(err.string());
  const int status = std::system(cmd.c_str());
  RunResult r;
  if (WIFEXITED(status)) {
    r.code = WEXITSTATUS(status);
  } else {
    r.code = 1000 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace di::testing
