// deepinfer: command-line entry point. Subcommands live in cmd_*.cc.

#include <cstdio>
#include <exception>
#include <vector>

#include "commands.h"
#include "common/error.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"DeepInfer: offline inference engine for the DeepSeek-V4 family"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  std::vector<di::cli::Command> commands;
  commands.push_back(di::cli::add_inspect(app));
  commands.push_back(di::cli::add_synth(app));
  commands.push_back(di::cli::add_replay_fixture(app));
  commands.push_back(di::cli::add_generate(app));
  commands.push_back(di::cli::add_chat(app));
  commands.push_back(di::cli::add_bench(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  di::set_log_level(spdlog::level::from_str(log_level));
  try {
    for (auto& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const di::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 2;
}
