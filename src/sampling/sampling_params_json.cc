#include "sampling/sampling_params_json.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/check.h"

namespace di {
namespace {

using deepinfer::SamplingParams;
using nlohmann::json;

// Typed access to one JSON object; `where` prefixes every message ("request field" or
// "<path>: key").
class FieldReader {
 public:
  FieldReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  // nullptr when the key is absent or null.
  const json* get(const char* key) const {
    const auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  void read_double(const char* key, double& out) const {
    if (const json* v = get(key)) out = as_double(key, *v);
  }
  void read_int(const char* key, int64_t& out) const {
    if (const json* v = get(key)) out = as_int(key, *v);
  }
  void read_bool(const char* key, bool& out) const {
    if (const json* v = get(key)) {
      if (!v->is_boolean()) fail(key, "a boolean", *v);
      out = v->get<bool>();
    }
  }

  double as_double(const char* key, const json& v) const {
    if (!v.is_number()) fail(key, "a number", v);
    return v.get<double>();
  }

  int64_t as_int(const char* key, const json& v) const {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
        fail(key, "an integer in the int64 range", v);
      }
      return v.get<int64_t>();
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      // 2^63 is exactly representable; everything below it converts without overflow.
      if (std::isfinite(d) && std::trunc(d) == d && d >= -9223372036854775808.0 &&
          d < 9223372036854775808.0) {
        return static_cast<int64_t>(d);
      }
    }
    fail(key, "an integer", v);
  }

  [[noreturn]] void fail(const char* key, const char* expected, const json& v) const {
    const std::string shown = v.is_number() ? v.dump() : std::string(v.type_name());
    DI_FAIL("{} `{}` must be {}, got {}", where_, key, expected, shown);
  }

 private:
  const json& obj_;
  std::string where_;
};

uint64_t read_seed(const FieldReader& r, const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  // Negative seeds (OpenAI allows any int64) are taken modulo 2^64.
  return static_cast<uint64_t>(r.as_int("seed", v));
}

std::vector<std::string> read_stop(const FieldReader& r, const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) r.fail("stop", "a string or a list of strings", v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      r.fail(fmt::format("stop[{}]", i).c_str(), "a string", v[i]);
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::vector<int64_t> read_int_list(const FieldReader& r, const char* key, const json& v) {
  if (!v.is_array()) r.fail(key, "a list of integers", v);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(r.as_int(fmt::format("{}[{}]", key, i).c_str(), v[i]));
  }
  return out;
}

// `logprobs`: an integer N (completions API), or a boolean that enables the chat API's
// `top_logprobs` (0 when absent). `top_logprobs` without `logprobs: true` is an error, as in vLLM.
void read_logprobs(const FieldReader& r, SamplingParams& p) {
  const json* lp = r.get("logprobs");
  const json* top = r.get("top_logprobs");
  if (lp && lp->is_boolean()) {
    if (lp->get<bool>()) {
      p.logprobs = top ? r.as_int("top_logprobs", *top) : 0;
      return;
    }
    p.logprobs.reset();
  } else if (lp) {
    if (!lp->is_number()) r.fail("logprobs", "an integer or a boolean", *lp);
    p.logprobs = r.as_int("logprobs", *lp);
  }
  if (top && !(lp && lp->is_boolean() && lp->get<bool>())) {
    DI_FAIL("request field `top_logprobs` needs `logprobs` set to true");
  }
}

}  // namespace

SamplingParams sampling_params_from_json(const json& body, const SamplingParams& defaults) {
  if (!body.is_object()) {
    DI_FAIL("request body must be a JSON object, got {}", body.type_name());
  }
  const FieldReader r(body, "request field");
  SamplingParams p = defaults;
  r.read_int("max_tokens", p.max_tokens);
  r.read_int("max_completion_tokens", p.max_tokens);
  r.read_int("min_tokens", p.min_tokens);
  r.read_double("temperature", p.temperature);
  r.read_double("top_p", p.top_p);
  r.read_int("top_k", p.top_k);
  r.read_double("min_p", p.min_p);
  r.read_double("presence_penalty", p.presence_penalty);
  r.read_double("frequency_penalty", p.frequency_penalty);
  r.read_double("repetition_penalty", p.repetition_penalty);
  if (const json* v = r.get("seed")) p.seed = read_seed(r, *v);
  if (const json* v = r.get("stop")) p.stop = read_stop(r, *v);
  if (const json* v = r.get("stop_token_ids")) {
    p.stop_token_ids = read_int_list(r, "stop_token_ids", *v);
  }
  r.read_bool("ignore_eos", p.ignore_eos);
  r.read_bool("include_stop_str_in_output", p.include_stop_str_in_output);
  r.read_bool("skip_special_tokens", p.skip_special_tokens);
  read_logprobs(r, p);
  if (const json* v = r.get("prompt_logprobs")) {
    p.prompt_logprobs = r.as_int("prompt_logprobs", *v);
  }
  return p;
}

Result<SamplingParams> try_sampling_params_from_json(const json& body,
                                                     const SamplingParams& defaults) {
  try {
    return sampling_params_from_json(body, defaults);
  } catch (const Error& e) {
    return Status(StatusCode::kInvalidArgument, e.message());
  }
}

SamplingParams defaults_from_generation_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "generation_config.json";
  SamplingParams p;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return p;

  std::ifstream in(path, std::ios::binary);
  if (!in.good()) DI_FAIL("cannot read {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  json cfg;
  try {
    cfg = json::parse(text.str());
  } catch (const json::parse_error& e) {
    DI_FAIL("{}: invalid JSON: {}", path.string(), e.what());
  }
  if (!cfg.is_object())
    DI_FAIL("{}: must hold a JSON object, got {}", path.string(), cfg.type_name());

  const FieldReader r(cfg, path.string() + ":");
  r.read_double("temperature", p.temperature);
  r.read_double("top_p", p.top_p);
  r.read_int("top_k", p.top_k);
  r.read_double("min_p", p.min_p);
  r.read_double("repetition_penalty", p.repetition_penalty);
  r.read_int("max_new_tokens", p.max_tokens);
  // Vocabulary-dependent checks do not concern these fields; any positive size will do.
  const std::string err = p.validate(std::numeric_limits<int64_t>::max());
  if (!err.empty()) DI_FAIL("{}: {}", path.string(), err);
  return p;
}

}  // namespace di
