// deepinfer generate: offline generation over prompts or a JSONL batch (src/engine/batch_io.h).

#include <cstdio>
#include <memory>
#include <optional>

#include "commands.h"
#include "common/check.h"
#include "common/logging.h"
#include "deepinfer/llm.h"
#include "engine/batch_io.h"
#include "engine/llm_impl.h"
#include "engine/output_json.h"
#include "engine_options.h"
#include "progress.h"
#include "sampling/sampling_params_json.h"

namespace di::cli {
namespace {

using json = nlohmann::ordered_json;

struct GenerateArgs {
  EngineFlags engine;
  SamplingFlags sampling;
  std::vector<std::string> prompts;
  std::string input;
  std::string output;
  bool chat = false;
  bool json_lines = false;
  bool no_thinking = false;
  std::string reasoning_effort;
  bool no_progress = false;
};

int run_generate(GenerateArgs& a) {
  DI_CHECK(a.prompts.empty() != a.input.empty(), "give either --prompt or --input");
  deepinfer::LLM llm(a.engine.model, engine_config(a.engine));
  deepinfer::LLM::Impl& impl = llm.impl();
  const deepinfer::SamplingParams defaults =
      apply_sampling_flags(a.sampling, llm.default_sampling_params());

  std::vector<BatchItem> items;
  if (!a.input.empty()) {
    items = read_batch_file(a.input);
  } else {
    for (size_t i = 0; i < a.prompts.size(); ++i) {
      BatchItem it;
      it.line_number = static_cast<int64_t>(i + 1);
      it.custom_id = fmt::format("prompt-{}", i + 1);
      it.sampling = json::object();
      if (a.chat) {
        it.kind = BatchItem::Kind::kChat;
        it.messages = json::array({json{{"role", "user"}, {"content", a.prompts[i]}}});
      } else {
        it.prompt = a.prompts[i];
      }
      items.push_back(std::move(it));
    }
  }
  const bool jsonl = !a.input.empty() || a.json_lines || !a.output.empty();
  std::unique_ptr<BatchOutputWriter> writer;
  if (!a.output.empty()) writer = std::make_unique<BatchOutputWriter>(a.output);
  int64_t failed = 0, skipped = 0, succeeded = 0;
  auto emit = [&](const json& line, const deepinfer::RequestOutput* out) {
    if (writer) {
      writer->write(line);
    } else if (jsonl) {
      std::printf("%s\n", line.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
      std::fflush(stdout);
    } else if (out != nullptr && out->error.empty()) {
      const deepinfer::CompletionOutput& c = out->outputs.at(0);
      if (c.reasoning_content && !c.reasoning_content->empty()) {
        std::fprintf(stderr, "[reasoning] %s\n", c.reasoning_content->c_str());
      }
      std::printf("%s\n", (c.content ? *c.content : c.text).c_str());
      std::fflush(stdout);
    } else {
      std::fprintf(stderr, "error: %s\n", line["error"]["message"].get<std::string>().c_str());
    }
    if (line.contains("error")) {
      ++failed;
    } else {
      ++succeeded;
    }
  };

  di::EngineCore& core = impl.core();
  int64_t queued = 0;
  for (BatchItem& it : items) {
    if (writer && writer->done(it.custom_id)) {
      ++skipped;
      continue;
    }
    if (!it.error.empty()) {
      emit(error_json(it.custom_id, it.error), nullptr);
      continue;
    }
    Result<deepinfer::SamplingParams> sp =
        try_sampling_params_from_json(nlohmann::json::parse(it.sampling.dump()), defaults);
    if (!sp.is_ok()) {
      emit(error_json(it.custom_id,
                      fmt::format("line {}: {}", it.line_number, sp.status().message())),
           nullptr);
      continue;
    }
    NewRequest req;
    if (it.kind == BatchItem::Kind::kChat) {
      deepinfer::ChatOptions co;
      co.thinking = it.thinking.value_or(!a.no_thinking);
      if (it.reasoning_effort) co.reasoning_effort = *it.reasoning_effort;
      if (!a.reasoning_effort.empty() && !it.reasoning_effort) {
        co.reasoning_effort = a.reasoning_effort;
      }
      if (!it.tools.is_null()) co.tools_json = it.tools.dump();
      req = impl.chat_request(it.messages, sp.value(), co, it.custom_id);
    } else if (it.kind == BatchItem::Kind::kTokenIds) {
      req = impl.text_request(deepinfer::Prompt(it.prompt_token_ids), sp.value(), it.custom_id);
    } else {
      req = impl.text_request(deepinfer::Prompt(it.prompt), sp.value(), it.custom_id);
    }
    if (!req.error.empty()) req.error = fmt::format("line {}: {}", it.line_number, req.error);
    core.add_request(std::move(req));
    ++queued;
  }
  if (skipped > 0) {
    DI_LOG_INFO("{}: {} requests already done, skipped", a.output, skipped);
  }
  Progress progress(queued, !a.no_progress);
  int64_t done = 0, in_tokens = 0, out_tokens = 0;
  while (core.has_unfinished()) {
    for (EngineCore::Update& u : core.step()) {
      if (!u.output.finished) continue;
      ++done;
      in_tokens += static_cast<int64_t>(u.output.prompt_token_ids.size());
      out_tokens += static_cast<int64_t>(u.output.outputs.at(0).token_ids.size());
      emit(request_output_json(u.output, u.output.request_id), &u.output);
      progress.update(done, in_tokens, out_tokens);
    }
  }
  progress.finish();
  const double secs = core.seconds_since_start();
  DI_LOG_INFO(
      "{} requests: {} succeeded, {} failed, {} skipped (already in the output); "
      "{} input + {} output tokens in {:.2f} s ({:.1f} output tok/s), {} preemptions",
      items.size(), succeeded, failed, skipped, in_tokens, out_tokens, secs,
      secs > 0 ? static_cast<double>(out_tokens) / secs : 0.0, core.totals().preemptions);
  return failed > 0 ? 1 : 0;
}

}  // namespace

Command add_generate(CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* app = root.add_subcommand("generate", "generate text for prompts or a JSONL batch");
  add_engine_flags(*app, args->engine);
  add_sampling_flags(*app, args->sampling);
  app->add_option("--prompt", args->prompts, "prompt text (repeatable)");
  app->add_option("--input", args->input,
                  "JSONL input (prompt / prompt_token_ids / messages / "
                  "OpenAI batch lines)")
      ->check(CLI::ExistingFile);
  app->add_option("--output", args->output,
                  "JSONL output, appended as requests finish; rerun to resume");
  app->add_flag("--chat", args->chat, "treat each --prompt as a user message (chat encoding)");
  app->add_flag("--json", args->json_lines, "print JSON lines instead of text");
  app->add_flag("--no-thinking", args->no_thinking,
                "chat: non-thinking mode (default: thinking, unless a line says otherwise)");
  app->add_option("--reasoning-effort", args->reasoning_effort,
                  "chat: low | high | max | 1..100 (V4.1)");
  app->add_flag("--no-progress", args->no_progress, "no progress bar / progress lines");
  return {app, [args] { return run_generate(*args); }};
}

}  // namespace di::cli
