#pragma once

#include <CLI/CLI.hpp>

namespace di::cli {

// Each subcommand registers its options on `app` and returns the function that runs it.
// Exit codes: 0 success, 1 the input was read but failed validation, 2 bad input or usage.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_inspect(CLI::App& root);
Command add_synth(CLI::App& root);
Command add_replay_fixture(CLI::App& root);
Command add_generate(CLI::App& root);
Command add_chat(CLI::App& root);
Command add_bench(CLI::App& root);

}  // namespace di::cli
