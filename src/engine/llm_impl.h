#pragma once

// LLM::Impl: what the public LLM class owns. Internal; the CLI uses it for the JSONL runner.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "deepinfer/llm.h"
#include "engine/bundled_tokenizer.h"
#include "engine/engine_core.h"
#include "model/forward_api.h"
#include "model/model_stats.h"

namespace deepinfer {

class LLM::Impl {
 public:
  Impl(const std::filesystem::path& model_dir, const EngineConfig& config);
  ~Impl();

  // Requests for the engine core; problems in the input (bad messages, malformed tools) land
  // in NewRequest::error and surface as that request's error output.
  di::NewRequest text_request(const Prompt& prompt, const SamplingParams& params,
                              std::string request_id) const;
  di::NewRequest chat_request(const nlohmann::ordered_json& messages, const SamplingParams& params,
                              const ChatOptions& options, std::string request_id) const;
  // Runs the requests to completion; results in input order.
  std::vector<RequestOutput> run(std::vector<di::NewRequest> requests,
                                 const StreamCallback& on_update);
  std::string next_request_id();

  const SamplingParams& defaults() const { return defaults_; }
  di::EngineCore& core() { return *core_; }
  const di::Tokenizer& tokenizer() const { return tokenizer_->tokenizer; }
  const di::ModelConfig& model_config() const { return model_config_; }
  const EngineConfig& config() const { return config_; }

 private:
  EngineConfig config_;
  di::ModelConfig model_config_;
  std::unique_ptr<di::ResolvedTokenizer> tokenizer_;
  std::unique_ptr<di::ForwardModel> model_;
  di::StateBytes state_bytes_;
  std::unique_ptr<di::EngineCore> core_;
  SamplingParams defaults_;
  int64_t next_request_ = 0;
};

}  // namespace deepinfer
