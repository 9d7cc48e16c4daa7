// deepinfer::LLM: model loading and the offline generate/chat loops over the engine core.

#include "deepinfer/llm.h"

#include <cstdlib>
#include <unordered_map>

#include "chat/encoder.h"
#include "chat/message.h"
#include "chat/output_parser.h"
#include "common/check.h"
#include "common/logging.h"
#if DI_HAVE_CUDA
#include "model/deepseek_v41/cuda_model.h"
#endif
#include "engine/bundled_tokenizer.h"
#include "engine/engine_core.h"
#include "engine/llm_impl.h"
#include "engram/token_map_builder.h"
#include "kernels/params/sparse_attention.h"
#include "model/deepseek_v41/cpu_model.h"
#include "model/layer_plan.h"
#include "model/model_stats.h"
#include "sampling/sampling_params_json.h"

namespace deepinfer {

using di::Error;

namespace {

// EngineConfig::attention_kernel (checked whatever the backend).
di::AttnTensorKernel attention_kernel_of(const std::string& name) {
  if (name == "auto") return di::AttnTensorKernel::kAuto;
  if (name == "mma-sync") return di::AttnTensorKernel::kMmaSync;
  if (name == "wgmma") return di::AttnTensorKernel::kWgmma;
  DI_FAIL("--attention-kernel {}: auto, mma-sync or wgmma", name);
}

std::filesystem::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "deepinfer";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "deepinfer";
  }
  return std::filesystem::temp_directory_path() / "deepinfer-cache";
}

// The Engram map: the model directory's file wins; else the one cached for this tokenizer;
// else derived from the tokenizer (and cached).
di::CompressedTokenMap engram_token_map(const std::filesystem::path& model_dir,
                                        const di::ResolvedTokenizer& tok, int64_t classes,
                                        const std::filesystem::path& cache_dir) {
  if (std::filesystem::exists(model_dir / di::kEngramTokenMapFile)) {
    return di::CompressedTokenMap::load(model_dir, classes);
  }
  const std::filesystem::path cached = cache_dir / di::token_map_cache_name(tok.json);
  if (std::filesystem::exists(cached)) {
    try {
      return di::CompressedTokenMap::load_file(cached, classes);
    } catch (const Error& e) {
      DI_LOG_WARN("ignoring unusable cached Engram map: {}", e.what());
    }
  }
  di::CompressedTokenMap map = di::build_compressed_token_map(tok.tokenizer, tok.source);
  DI_CHECK(map.compressed_vocab_size() == classes,
           "the Engram map derived from {} has {} classes; the model config needs {}", tok.source,
           map.compressed_vocab_size(), classes);
  try {
    std::filesystem::create_directories(cache_dir);
    di::write_token_map_file(map, cached);
  } catch (const std::exception& e) {
    DI_LOG_WARN("could not cache the Engram map in {}: {}", cache_dir.string(), e.what());
  }
  return map;
}

// "auto": bf16 on the GPU (the reference's own dtype, its tensor-core kernels; as fast as fp32
// activations there, while the GPU's fp32 precision runs the exact-order validation linears),
// fp32 on the CPU (the fixtures' tight rule).
EngineConfig resolve_precision(EngineConfig c) {
  if (c.precision == "auto") c.precision = c.backend == "cuda" ? "bf16" : "fp32";
  return c;
}

}  // namespace

LLM::Impl::Impl(const std::filesystem::path& model_dir, const EngineConfig& requested)
    : config_(resolve_precision(requested)), model_config_(di::load_model_config(model_dir)) {
  const EngineConfig& config = config_;
#if DI_HAVE_CUDA
  DI_CHECK(config.backend == "cpu" || config.backend == "cuda",
           "--backend {}: expected cpu or cuda", config.backend);
#else
  DI_CHECK(config.backend == "cpu",
           "--backend {}: only the CPU reference backend can run generation in this build (the "
           "CUDA backend needs a build with -DDI_ENABLE_CUDA=ON)",
           config.backend);
#endif
  if (config.backend == "cuda") {
    DI_CHECK(config.precision == "fp32" || config.precision == "bf16",
             "--precision {}: the CUDA backend runs fp32 and bf16", config.precision);
  }
  DI_CHECK(config.precision == "fp32" || config.precision == "fp64" || config.precision == "bf16",
           "--precision {}: the CPU backend supports fp32, bf16 and fp64", config.precision);
  tokenizer_ = std::make_unique<di::ResolvedTokenizer>(
      di::resolve_tokenizer(model_dir, model_config_.family, config.tokenizer));
  if (static_cast<int64_t>(tokenizer_->tokenizer.vocab_size()) != model_config_.vocab_size) {
    // Fine for token-id prompts on small test models; text prompts may then produce ids the
    // model does not have, which are rejected per request.
    DI_LOG_WARN("tokenizer {} has {} ids but the model's vocabulary is {}", tokenizer_->source,
                tokenizer_->tokenizer.vocab_size(), model_config_.vocab_size);
  }
  std::optional<di::CompressedTokenMap> token_map;
  if (!model_config_.engram_layer_ids.empty()) {
    token_map = engram_token_map(model_dir, *tokenizer_, model_config_.engram_compressed_vocab_size,
                                 config.cache_dir.empty() ? default_cache_dir() : config.cache_dir);
  }
  di::ForwardOptions fo;
  fo.precision = config.precision == "fp64"   ? di::Precision::kFp64
                 : config.precision == "bf16" ? di::Precision::kBf16
                                              : di::Precision::kFp32;
  fo.quirk =
      config.index_key_quirk_shipped ? di::IndexKeyQuirk::kShipped : di::IndexKeyQuirk::kIntended;
  DI_CHECK(config.engram_tables == "auto" || config.engram_tables == "mapped" ||
               config.engram_tables == "resident",
           "--engram-tables {}: auto, mapped or resident", config.engram_tables);
  fo.engram_tables = config.engram_tables == "mapped"     ? di::EngramTables::kMapped
                     : config.engram_tables == "resident" ? di::EngramTables::kResident
                                                          : di::EngramTables::kAuto;
  [[maybe_unused]] const di::AttnTensorKernel attention_kernel =
      attention_kernel_of(config.attention_kernel);
  di::KvCacheConfig cache;
  cache.memory_budget_bytes =
      config.kv_cache_memory_bytes > 0 ? config.kv_cache_memory_bytes : (4ull << 30);
  if (config.kv_cache_page_bytes > 0) cache.page_bytes = config.kv_cache_page_bytes;
#if DI_HAVE_CUDA
  // The device cache pool has the scheduler's budget and page size: what it admits fits.
  di::CudaForwardOptions cuda;
  cuda.kv_cache_bytes = cache.memory_budget_bytes;
  cuda.kv_cache_page_bytes = cache.page_bytes;
  cuda.drafter = di::DsparkDrafter::kNone;  // no speculative decoding yet: no drafter
  cuda.attention_kernel = attention_kernel;
  model_ = config.backend == "cuda"
               ? di::load_cuda_forward_model(model_dir, fo, cuda, std::move(token_map))
               : di::load_cpu_forward_model(model_dir, fo, std::move(token_map));
#else
  model_ = di::load_cpu_forward_model(model_dir, fo, std::move(token_map));
#endif
  state_bytes_ = di::compute_state_bytes(model_config_, di::build_layer_plan(model_config_));

  di::EngineCoreConfig core;
  core.scheduler.max_num_seqs = config.max_num_seqs;
  core.scheduler.max_num_batched_tokens = config.max_num_batched_tokens;
  core.scheduler.max_model_len =
      config.max_model_len > 0 ? config.max_model_len : model_config_.max_position_embeddings;
  DI_CHECK(core.scheduler.max_model_len <= model_config_.max_position_embeddings,
           "--max-model-len {} exceeds the model's max_position_embeddings {}",
           core.scheduler.max_model_len, model_config_.max_position_embeddings);
  core.cache = cache;
  core.seed = config.seed;
  core.sample_in_backend = config.backend_sampling;
  core_ = std::make_unique<di::EngineCore>(*model_, tokenizer_->tokenizer, model_config_,
                                           state_bytes_, core);
  defaults_ = config.use_generation_config ? di::defaults_from_generation_config(model_dir)
                                           : SamplingParams{};
  DI_LOG_INFO(
      "model {} ({}, {} layers, vocab {}), tokenizer: {}, backend {}/{}, "
      "max_num_seqs {}, max_num_batched_tokens {}, max_model_len {}, state memory {} "
      "({} pages of {})",
      model_dir.string(), di::model_family_name(model_config_.family), model_config_.num_layers,
      model_config_.vocab_size, tokenizer_->source, config.backend, config.precision,
      core.scheduler.max_num_seqs, core.scheduler.max_num_batched_tokens,
      core.scheduler.max_model_len, di::format_bytes(core.cache.memory_budget_bytes),
      core_->cache().total_pages(),
      di::format_bytes(static_cast<uint64_t>(core_->cache().page_bytes())));
}

LLM::Impl::~Impl() = default;

di::NewRequest LLM::Impl::text_request(const Prompt& prompt, const SamplingParams& params,
                                       std::string request_id) const {
  di::NewRequest r;
  r.request_id = std::move(request_id);
  r.params = params;
  if (const auto* text = std::get_if<std::string>(&prompt)) {
    r.prompt = *text;
    for (int32_t id : tokenizer_->tokenizer.encode(*text, /*parse_special_tokens=*/true))
      r.prompt_token_ids.push_back(id);
  } else {
    r.prompt_token_ids = std::get<std::vector<int64_t>>(prompt);
  }
  return r;
}

di::NewRequest LLM::Impl::chat_request(const nlohmann::ordered_json& messages,
                                       const SamplingParams& params, const ChatOptions& options,
                                       std::string request_id) const {
  di::NewRequest r;
  r.request_id = std::move(request_id);
  r.params = params;
  try {
    const auto version =
        model_config_.is_v41() ? di::chat::ModelVersion::kV41 : di::chat::ModelVersion::kV4;
    di::chat::EncodeOptions eo;
    eo.thinking_mode =
        options.thinking ? di::chat::ThinkingMode::kThinking : di::chat::ThinkingMode::kChat;
    if (!options.reasoning_effort.empty()) {
      const std::string& e = options.reasoning_effort;
      const bool numeric = e.find_first_not_of("0123456789") == std::string::npos && e.size() <= 4;
      if (numeric) {
        eo.reasoning_effort = std::stoi(e);
      } else {
        eo.reasoning_effort = e;
      }
    }
    if (!options.tools_json.empty()) {
      eo.tools = di::chat::Json::parse(options.tools_json);
      di::chat::validate_tools(eo.tools, "tools");
    }
    const std::vector<di::chat::Message> msgs = di::chat::parse_messages_json(messages);
    const di::chat::EncodedPrompt enc = di::chat::encode(version, msgs, eo);
    DI_CHECK(enc.image_urls.empty(),
             "the conversation has {} image part(s); image input needs the vision tower, which "
             "this engine does not implement yet",
             enc.image_urls.size());
    r.prompt = enc.text;
    for (int32_t id : tokenizer_->tokenizer.encode(enc.text, /*parse_special_tokens=*/true))
      r.prompt_token_ids.push_back(id);
    auto parser = std::make_shared<di::chat::StreamingParser>(version, eo.thinking_mode);
    auto fed = std::make_shared<size_t>(0);
    const std::string call_prefix = "call_" + r.request_id + "_";
    r.parser = [parser, fed, call_prefix](CompletionOutput& c, bool finished) {
      if (c.text.size() > *fed) {
        parser->feed(std::string_view(c.text).substr(*fed));
        *fed = c.text.size();
      }
      if (finished) parser->finish();
      const di::chat::ParsedCompletion& p = parser->result();
      c.reasoning_content = p.reasoning_content;
      c.content = p.content;
      c.tool_calls.clear();
      for (size_t k = 0; k < p.tool_calls.size(); ++k) {
        const di::chat::ToolCall& t = p.tool_calls[k];
        c.tool_calls.push_back(ToolCall{t.id.empty() ? call_prefix + std::to_string(k) : t.id,
                                        t.name, t.arguments.dump()});
      }
    };
  } catch (const Error& e) {
    r.error = e.message();
  } catch (const nlohmann::json::exception& e) {
    r.error = fmt::format("tools: malformed JSON: {}", e.what());
  }
  return r;
}

std::vector<RequestOutput> LLM::Impl::run(std::vector<di::NewRequest> requests,
                                          const StreamCallback& on_update) {
  std::unordered_map<int64_t, size_t> index_of;
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].stream = on_update != nullptr;  // otherwise only final outputs are built
    index_of[core_->add_request(std::move(requests[i]))] = i;
  }
  std::vector<RequestOutput> results(requests.size());
  while (core_->has_unfinished()) {
    for (di::EngineCore::Update& u : core_->step()) {
      if (on_update) on_update(u.output);
      if (u.output.finished) results[index_of.at(u.id)] = std::move(u.output);
    }
  }
  return results;
}

std::string LLM::Impl::next_request_id() {
  return std::to_string(next_request_++);
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const SamplingParams& params,
                                         const StreamCallback& on_update) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params), on_update);
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         const StreamCallback& on_update) {
  DI_CHECK(params.size() == prompts.size(), "generate: {} prompts but {} SamplingParams",
           prompts.size(), params.size());
  std::vector<di::NewRequest> requests;
  requests.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back(impl_->text_request(prompts[i], params[i], impl_->next_request_id()));
  }
  return impl_->run(std::move(requests), on_update);
}

std::vector<RequestOutput> LLM::chat(const std::vector<std::string>& conversations_json,
                                     const SamplingParams& params, const ChatOptions& options,
                                     const StreamCallback& on_update) {
  std::vector<di::NewRequest> requests;
  requests.reserve(conversations_json.size());
  for (const std::string& text : conversations_json) {
    nlohmann::ordered_json messages;
    std::string error;
    try {
      messages = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      error = fmt::format("conversation: malformed JSON: {}", e.what());
    }
    di::NewRequest r =
        error.empty() ? impl_->chat_request(messages, params, options, impl_->next_request_id())
                      : di::NewRequest{};
    if (!error.empty()) {
      r.request_id = impl_->next_request_id();
      r.params = params;
      r.error = error;
    }
    requests.push_back(std::move(r));
  }
  return impl_->run(std::move(requests), on_update);
}

LLM::LLM(const std::filesystem::path& model_dir, const EngineConfig& config)
    : impl_(std::make_unique<Impl>(model_dir, config)) {}
LLM::~LLM() = default;
LLM::LLM(LLM&&) noexcept = default;
LLM& LLM::operator=(LLM&&) noexcept = default;

SamplingParams LLM::default_sampling_params() const {
  return impl_->defaults();
}

const EngineConfig& LLM::config() const {
  return impl_->config();
}

}  // namespace deepinfer
