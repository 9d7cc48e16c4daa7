#pragma once

// Engine and sampling flags shared by `generate`, `chat` and `bench` (vLLM flag names).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/llm.h"

namespace di::cli {

struct EngineFlags {
  std::string model;
  deepinfer::EngineConfig config;
  std::string kv_cache_memory;             // bytes, with optional K/M/G/KiB/MiB/GiB suffix
  std::string generation_config = "auto";  // auto | vllm (library defaults)
};
void add_engine_flags(CLI::App& app, EngineFlags& flags);
// Resolves the flags into flags.config (throws di::Error on a bad size string).
deepinfer::EngineConfig engine_config(EngineFlags& flags);

struct SamplingFlags {
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty,
      repetition_penalty;
  std::optional<int64_t> top_k, max_tokens, min_tokens, logprobs, prompt_logprobs;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool keep_special_tokens = false;
};
void add_sampling_flags(CLI::App& app, SamplingFlags& flags);
// The flags that were given, over `defaults` (generation_config.json or library defaults).
deepinfer::SamplingParams apply_sampling_flags(const SamplingFlags& flags,
                                               deepinfer::SamplingParams defaults);

// "4GiB" -> 4294967296; plain integers are bytes.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace di::cli
