#pragma once

// JSON records of finished requests (the `deepinfer generate` output lines).

#include <nlohmann/json.hpp>
#include <string>

#include "deepinfer/request_output.h"

namespace di {

// {"custom_id", "request_id", "token_ids", "text", ["reasoning_content", "content",
//  "tool_calls"], "finish_reason", "stop_reason", "usage": {...}, "metrics": {...},
//  ["logprobs"], ["prompt_logprobs"]}; or {"custom_id", "error": {"message", "type"}} when the
// request failed.
nlohmann::ordered_json request_output_json(const deepinfer::RequestOutput& out,
                                           const std::string& custom_id);

nlohmann::ordered_json error_json(const std::string& custom_id, const std::string& message);

}  // namespace di
