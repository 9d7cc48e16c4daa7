#include "engine_options.h"

#include <cctype>

#include "common/check.h"

namespace di::cli {

void add_engine_flags(CLI::App& app, EngineFlags& f) {
  app.add_option("--model", f.model, "model directory (config.json + safetensors)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--backend", f.config.backend, "cpu | cuda (CUDA builds; fp32 or bf16)")
      ->capture_default_str();
  app.add_option("--precision", f.config.precision,
                 "auto (cuda: bf16, cpu: fp32) | fp32 | bf16 (the reference's bf16 semantics) | "
                 "fp64 (CPU validation)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp64"}))
      ->capture_default_str();
  app.add_flag("--host-sampling{false}", f.config.backend_sampling,
               "sample on the host from logits copied back (default: where the logits are, on "
               "the GPU for --backend cuda)");
  app.add_flag("--index-key-quirk-shipped", f.config.index_key_quirk_shipped,
               "reproduce the shipped reference's stale index keys");
  app.add_option("--engram-tables", f.config.engram_tables,
                 "auto (resident in memory when they fit in half of it) | mapped (pages faulted "
                 "in on first use) | resident (every page read at load)")
      ->check(CLI::IsMember({"auto", "mapped", "resident"}))
      ->capture_default_str();
  app.add_option("--attention-kernel", f.config.attention_kernel,
                 "cuda: auto (wgmma in bf16 on sm_90: throughput) | mma-sync (lower batch-1 "
                 "latency) | wgmma")
      ->check(CLI::IsMember({"auto", "mma-sync", "wgmma"}))
      ->capture_default_str();
  app.add_option("--max-num-seqs", f.config.max_num_seqs, "requests running at once, at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", f.config.max_num_batched_tokens,
                 "tokens per engine step, at most (prefills are chunked to fit)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-model-len", f.config.max_model_len,
                 "prompt + output tokens per request, at most (0: the model's limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-memory", f.kv_cache_memory,
                 "bytes for per-sequence state (KV cache), e.g. 4GiB (default 4GiB on CPU)");
  app.add_option("--kv-cache-page-bytes", f.config.kv_cache_page_bytes,
                 "bytes per state page (default 64 KiB)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", f.config.seed, "engine seed (requests without a seed derive theirs)")
      ->capture_default_str();
  app.add_option("--tokenizer", f.config.tokenizer,
                 "tokenizer.json (default: the model's, else the bundled one)")
      ->check(CLI::ExistingFile);
  app.add_option("--cache-dir", f.config.cache_dir, "directory for derived data (Engram map)");
  app.add_option("--generation-config", f.generation_config,
                 "auto: sampling defaults from generation_config.json; vllm: library defaults")
      ->check(CLI::IsMember({"auto", "vllm"}))
      ->capture_default_str();
}

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0)
    ++i;
  DI_CHECK(i > 0 && i <= 19, "{}: '{}' is not a byte size (e.g. 4294967296, 512MiB, 4GiB)", flag,
           text);
  const uint64_t n = std::stoull(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char& c : unit)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  uint64_t mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  if (unit == "k" || unit == "kib" || unit == "kb") mult = 1ull << 10;
  if (unit == "m" || unit == "mib" || unit == "mb") mult = 1ull << 20;
  if (unit == "g" || unit == "gib" || unit == "gb") mult = 1ull << 30;
  if (unit == "t" || unit == "tib" || unit == "tb") mult = 1ull << 40;
  DI_CHECK(mult != 0, "{}: unknown unit '{}' in '{}' (use B, KiB, MiB, GiB, TiB)", flag,
           text.substr(i), text);
  DI_CHECK(n <= UINT64_MAX / mult && n > 0, "{}: '{}' is out of range", flag, text);
  return n * mult;
}

deepinfer::EngineConfig engine_config(EngineFlags& f) {
  if (!f.kv_cache_memory.empty()) {
    f.config.kv_cache_memory_bytes = parse_byte_size(f.kv_cache_memory, "--kv-cache-memory");
  }
  f.config.use_generation_config = f.generation_config == "auto";
  return f.config;
}

void add_sampling_flags(CLI::App& app, SamplingFlags& f) {
  app.add_option("--temperature", f.temperature, "0 = greedy");
  app.add_option("--top-p", f.top_p);
  app.add_option("--top-k", f.top_k, "0 or -1 = all");
  app.add_option("--min-p", f.min_p);
  app.add_option("--presence-penalty", f.presence_penalty);
  app.add_option("--frequency-penalty", f.frequency_penalty);
  app.add_option("--repetition-penalty", f.repetition_penalty);
  app.add_option("--max-tokens", f.max_tokens, "output tokens per request, at most");
  app.add_option("--min-tokens", f.min_tokens);
  app.add_option("--sampling-seed", f.seed, "seed of every request (default: derived per request)");
  app.add_option("--stop", f.stop, "stop string (repeatable)");
  app.add_option("--stop-token-ids", f.stop_token_ids, "stop token ids");
  app.add_flag("--ignore-eos", f.ignore_eos);
  app.add_flag("--include-stop-str-in-output", f.include_stop_str_in_output);
  app.add_option("--logprobs", f.logprobs, "top-N logprobs per output token");
  app.add_option("--prompt-logprobs", f.prompt_logprobs, "top-N logprobs per prompt token");
  app.add_flag("--keep-special-tokens", f.keep_special_tokens,
               "keep special tokens in the output text");
}

deepinfer::SamplingParams apply_sampling_flags(const SamplingFlags& f,
                                               deepinfer::SamplingParams p) {
  if (f.temperature) p.temperature = *f.temperature;
  if (f.top_p) p.top_p = *f.top_p;
  if (f.top_k) p.top_k = *f.top_k;
  if (f.min_p) p.min_p = *f.min_p;
  if (f.presence_penalty) p.presence_penalty = *f.presence_penalty;
  if (f.frequency_penalty) p.frequency_penalty = *f.frequency_penalty;
  if (f.repetition_penalty) p.repetition_penalty = *f.repetition_penalty;
  if (f.max_tokens) p.max_tokens = *f.max_tokens;
  if (f.min_tokens) p.min_tokens = *f.min_tokens;
  if (f.seed) p.seed = *f.seed;
  if (!f.stop.empty()) p.stop = f.stop;
  if (!f.stop_token_ids.empty()) p.stop_token_ids = f.stop_token_ids;
  if (f.ignore_eos) p.ignore_eos = true;
  if (f.include_stop_str_in_output) p.include_stop_str_in_output = true;
  if (f.logprobs) p.logprobs = *f.logprobs;
  if (f.prompt_logprobs) p.prompt_logprobs = *f.prompt_logprobs;
  if (f.keep_special_tokens) p.skip_special_tokens = false;
  return p;
}

}  // namespace di::cli
