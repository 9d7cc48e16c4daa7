#include "engine/output_json.h"

namespace di {

using json = nlohmann::ordered_json;

namespace {

json logprobs_json(const deepinfer::PositionLogprobs& pos) {
  json arr = json::array();
  for (const auto& [id, lp] : pos) {
    arr.push_back(json{
        {"token_id", id}, {"token", lp.decoded_token}, {"logprob", lp.logprob}, {"rank", lp.rank}});
  }
  return arr;
}

}  // namespace

json error_json(const std::string& custom_id, const std::string& message) {
  return json{{"custom_id", custom_id},
              {"error", json{{"message", message}, {"type", "invalid_request_error"}}}};
}

json request_output_json(const deepinfer::RequestOutput& out, const std::string& custom_id) {
  if (!out.error.empty()) return error_json(custom_id, out.error);
  const deepinfer::CompletionOutput& c = out.outputs.at(0);
  json j;
  j["custom_id"] = custom_id;
  j["request_id"] = out.request_id;
  j["token_ids"] = c.token_ids;
  j["text"] = c.text;
  if (c.reasoning_content) j["reasoning_content"] = *c.reasoning_content;
  if (c.content) j["content"] = *c.content;
  if (!c.tool_calls.empty()) {
    json calls = json::array();
    for (const deepinfer::ToolCall& t : c.tool_calls) {
      calls.push_back(json{{"id", t.id},
                           {"type", "function"},
                           {"function", json{{"name", t.name}, {"arguments", t.arguments}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  j["finish_reason"] = c.finish_reason;
  j["stop_reason"] = c.stop_reason.empty() ? json(nullptr) : json(c.stop_reason);
  const auto prompt_tokens = static_cast<int64_t>(out.prompt_token_ids.size());
  const auto completion_tokens = static_cast<int64_t>(c.token_ids.size());
  j["usage"] = json{{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens}};
  const deepinfer::RequestMetrics& m = out.metrics;
  j["metrics"] = json{{"time_in_queue", m.time_in_queue},
                      {"ttft", m.ttft},
                      {"tpot", m.tpot},
                      {"e2e", m.finished_time - m.arrival_time},
                      {"num_preemptions", m.num_preemptions}};
  if (!c.logprobs.empty()) {
    json lps = json::array();
    for (const auto& pos : c.logprobs)
      lps.push_back(logprobs_json(pos));
    j["logprobs"] = std::move(lps);
    j["cumulative_logprob"] = c.cumulative_logprob;
  }
  if (!out.prompt_logprobs.empty()) {
    json lps = json::array();
    for (const auto& pos : out.prompt_logprobs)
      lps.push_back(pos ? logprobs_json(*pos) : json(nullptr));
    j["prompt_logprobs"] = std::move(lps);
  }
  return j;
}

}  // namespace di
