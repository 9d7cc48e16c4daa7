#pragma once

// The offline C++ API, shaped like vLLM's `LLM`:
//
//   deepinfer::LLM llm("/models/DeepSeek-V4.1-Flash", deepinfer::EngineConfig{});
//   deepinfer::SamplingParams sp;
//   sp.temperature = 0;
//   for (const auto& out : llm.generate({"Hello"}, sp)) std::cout << out.outputs[0].text;
//
// Requests run together with continuous batching; results come back in input order. A bad
// request (invalid parameter, prompt too long, malformed message) yields a RequestOutput with
// `error` set; the other requests still run.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "deepinfer/request_output.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

struct EngineConfig {
  std::string backend = "cpu";  // "cpu" (reference) | "cuda" (CUDA builds)
  // "auto" (cuda: bf16, cpu: fp32) | "fp32" | "bf16" (the reference's bf16 semantics) | "fp64"
  // (CPU validation precision)
  std::string precision = "auto";
  bool index_key_quirk_shipped = false;  // reproduce the shipped reference's stale index keys
  // The Engram tables: "auto" (resident in memory when they take at most half of what is
  // available at load, else read through the checkpoint's mapping), "mapped", "resident".
  std::string engram_tables = "auto";
  // The CUDA backend's sparse-attention kernel, one for the whole run (results stay
  // batch-invariant): "auto" (wgmma in bf16 on sm_90: the throughput choice), "mma-sync" (lower
  // batch-1 latency, slower from batch ~64 and in prefill), "wgmma" (bf16, sm_90).
  std::string attention_kernel = "auto";
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 0;           // 0 = the model's max_position_embeddings
  uint64_t kv_cache_memory_bytes = 0;  // 0 = 4 GiB on the CPU backend
  int64_t kv_cache_page_bytes = 0;     // 0 = 64 KiB; >= the largest state entry
  uint64_t seed = 0;                   // derives per-request seeds for requests without one
  std::filesystem::path tokenizer;  // empty: the model dir's tokenizer.json, else the bundled one
  // Directory for derived data (the Engram token map); empty: $XDG_CACHE_HOME/deepinfer or
  // ~/.cache/deepinfer.
  std::filesystem::path cache_dir;
  bool use_generation_config = true;  // take sampling defaults from generation_config.json
  // cuda: sample on the GPU where the logits are (same token choices as the host sampler; only
  // token ids and logprobs come back). false: copy every logits row back and sample on the host.
  bool backend_sampling = true;
};

// A chat message in OpenAI form, as JSON text ({"role": ..., "content": ...}).
struct ChatOptions {
  bool thinking = true;                   // V4.1 default (vLLM wrapper): thinking on
  std::string reasoning_effort = "high";  // V4.1: "low" | "high" | "max" | "1".."100"
  std::string tools_json;                 // OpenAI `tools` array as JSON text; empty: none
};

// One prompt: text, or token ids.
using Prompt = std::variant<std::string, std::vector<int64_t>>;

// Called on the engine thread after every step for each request that produced tokens
// (cumulative output so far; `finished` set on the last call).
using StreamCallback = std::function<void(const RequestOutput&)>;

class LLM {
 public:
  LLM(const std::filesystem::path& model_dir, const EngineConfig& config = {});
  ~LLM();
  LLM(LLM&&) noexcept;
  LLM& operator=(LLM&&) noexcept;

  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const SamplingParams& params,
                                      const StreamCallback& on_update = nullptr);
  // Per-prompt parameters (same length as prompts).
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      const StreamCallback& on_update = nullptr);
  // Each conversation is a JSON array of OpenAI-style messages, encoded with the model's
  // official prompt encoding; outputs carry reasoning_content, content and tool_calls.
  std::vector<RequestOutput> chat(const std::vector<std::string>& conversations_json,
                                  const SamplingParams& params, const ChatOptions& options = {},
                                  const StreamCallback& on_update = nullptr);

  // generation_config.json defaults (or the library's when absent / disabled).
  SamplingParams default_sampling_params() const;
  // The configuration the engine runs with (precision "auto" resolved).
  const EngineConfig& config() const;

  class Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
