// deepinfer chat: an interactive conversation on stdin/stdout. Reasoning is shown apart from
// the answer (dimmed on a terminal, "[reasoning]" lines otherwise). Commands: /exit, /reset,
// /system TEXT, /think on|off, /effort low|high|max|1..100.

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "common/logging.h"
#include "deepinfer/llm.h"
#include "engine_options.h"

namespace di::cli {
namespace {

using json = nlohmann::ordered_json;

struct ChatArgs {
  EngineFlags engine;
  SamplingFlags sampling;
  std::string system;
  bool no_thinking = false;
  std::string reasoning_effort;
};

int run_chat(ChatArgs& a) {
  deepinfer::LLM llm(a.engine.model, engine_config(a.engine));
  const deepinfer::SamplingParams params =
      apply_sampling_flags(a.sampling, llm.default_sampling_params());
  deepinfer::ChatOptions options;
  options.thinking = !a.no_thinking;
  if (!a.reasoning_effort.empty()) options.reasoning_effort = a.reasoning_effort;
  const bool tty = isatty(STDOUT_FILENO) != 0 && isatty(STDIN_FILENO) != 0;
  json history = json::array();
  if (!a.system.empty()) history.push_back(json{{"role", "system"}, {"content", a.system}});
  std::string line;
  while (true) {
    if (tty) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history = json::array();
      if (!a.system.empty()) history.push_back(json{{"role", "system"}, {"content", a.system}});
      std::printf("(conversation cleared)\n");
      continue;
    }
    if (line.rfind("/system ", 0) == 0) {
      history.push_back(json{{"role", "system"}, {"content", line.substr(8)}});
      continue;
    }
    if (line == "/think on" || line == "/think off") {
      options.thinking = line == "/think on";
      continue;
    }
    if (line.rfind("/effort ", 0) == 0) {
      options.reasoning_effort = line.substr(8);
      continue;
    }
    history.push_back(json{{"role", "user"}, {"content", line}});
    size_t shown_reasoning = 0, shown_content = 0;
    bool in_reasoning = false;
    auto on_update = [&](const deepinfer::RequestOutput& out) {
      const deepinfer::CompletionOutput& c = out.outputs.at(0);
      const std::string reasoning = c.reasoning_content.value_or("");
      const std::string content = c.content.value_or(c.text);
      if (reasoning.size() > shown_reasoning) {
        if (!in_reasoning) {
          std::printf(tty ? "\x1b[2m" : "[reasoning] ");
          in_reasoning = true;
        }
        std::printf("%s", reasoning.substr(shown_reasoning).c_str());
        shown_reasoning = reasoning.size();
      }
      if (content.size() > shown_content) {
        if (in_reasoning) {
          std::printf(tty ? "\x1b[0m\n" : "\n");
          in_reasoning = false;
        }
        std::printf("%s", content.substr(shown_content).c_str());
        shown_content = content.size();
      }
      std::fflush(stdout);
    };
    const deepinfer::RequestOutput out =
        llm.chat({history.dump()}, params, options, on_update).at(0);
    if (in_reasoning) std::printf(tty ? "\x1b[0m" : "");
    std::printf("\n");
    if (!out.error.empty()) {
      std::fprintf(stderr, "error: %s\n", out.error.c_str());
      history.erase(history.end() - 1);
      continue;
    }
    const deepinfer::CompletionOutput& c = out.outputs.at(0);
    for (const deepinfer::ToolCall& t : c.tool_calls) {
      std::printf("[tool call] %s(%s)\n", t.name.c_str(), t.arguments.c_str());
    }
    json reply{{"role", "assistant"}, {"content", c.content.value_or(c.text)}};
    if (c.reasoning_content && !c.reasoning_content->empty()) {
      reply["reasoning_content"] = *c.reasoning_content;
    }
    history.push_back(std::move(reply));
  }
  return 0;
}

}  // namespace

Command add_chat(CLI::App& root) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* app = root.add_subcommand("chat", "interactive chat (reasoning shown apart)");
  add_engine_flags(*app, args->engine);
  add_sampling_flags(*app, args->sampling);
  app->add_option("--system", args->system, "system message");
  app->add_flag("--no-thinking", args->no_thinking, "non-thinking (chat) mode");
  app->add_option("--reasoning-effort", args->reasoning_effort, "low | high | max | 1..100");
  return {app, [args] { return run_chat(*args); }};
}

}  // namespace di::cli
