#pragma once

// SamplingParams from JSON: request bodies (OpenAI / vLLM field names) and the model's
// generation_config.json (vLLM's `--generation-config auto`).
//
// Error mechanism: both functions throw di::Error (DI_FAIL) whose message names the key (and, for
// generation_config.json, the file); try_sampling_params_from_json is the non-throwing form for
// request handling (house rule 5: request-level problems travel as a Status). Neither calls
// SamplingParams::validate for request bodies, because the vocabulary size is the engine's
// business: parse, then validate(vocab_size).

#include <filesystem>
#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "deepinfer/sampling_params.h"

namespace di {

// Reads the sampling fields of an OpenAI/vLLM request body over `defaults`. Known keys:
// max_tokens, max_completion_tokens (alias; wins over max_tokens, as in vLLM's chat API),
// temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty,
// seed, stop (string or list of strings), stop_token_ids, ignore_eos, min_tokens,
// logprobs (integer N, or the chat API's boolean together with top_logprobs), top_logprobs,
// prompt_logprobs, skip_special_tokens, include_stop_str_in_output.
// Unknown keys are ignored; a key whose value is JSON null keeps the default. A key of the wrong
// JSON type throws di::Error naming it, e.g. "request field `top_p` must be a number, got string".
// Integer fields accept integral floats (100.0) like pydantic's lax mode.
deepinfer::SamplingParams sampling_params_from_json(const nlohmann::json& body,
                                                    const deepinfer::SamplingParams& defaults);

// The same, returning Status(kInvalidArgument, message) instead of throwing.
Result<deepinfer::SamplingParams> try_sampling_params_from_json(
    const nlohmann::json& body, const deepinfer::SamplingParams& defaults);

// Library defaults overridden by `model_dir/generation_config.json` when that file exists: the
// keys vLLM takes from it (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens ->
// max_tokens). Other keys (do_sample, eos_token_id, ...) are ignored, as in vLLM. A missing file
// gives SamplingParams{}; an unreadable or malformed file, a wrongly typed key or an out-of-range
// value throws di::Error naming the file.
deepinfer::SamplingParams defaults_from_generation_config(const std::filesystem::path& model_dir);

}  // namespace di
