#include "sampling/sampling_params_json.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/check.h"

namespace di {
namespace {

using deepinfer::SamplingParams;
using nlohmann::json;

// Typed access to one JSON object; `where` prefixes every message ("request field" or
// "<path>:"). The as_* functions convert one value named `key` or throw di::Error naming it.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  // nullptr when the key is absent or null.
  const json* get(const char* key) const {
    const auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // out = as(reader, key, value) when the key is present and not null; `as` is one of the
  // as_* members or a function taking the same arguments.
  template <typename T, typename As>
  void read(const char* key, T& out, As as) const {
    if (const json* v = get(key)) out = std::invoke(as, *this, key, *v);
  }
  void read_double(const char* key, double& out) const { read(key, out, &FieldReader::as_double); }
  void read_int(const char* key, int64_t& out) const { read(key, out, &FieldReader::as_int); }
  void read_bool(const char* key, bool& out) const { read(key, out, &FieldReader::as_bool); }

  double as_double(std::string_view key, const json& v) const {
    if (!v.is_number()) fail(key, "a number", v);
    return v.get<double>();
  }

  bool as_bool(std::string_view key, const json& v) const {
    if (!v.is_boolean()) fail(key, "a boolean", v);
    return v.get<bool>();
  }

  std::string as_string(std::string_view key, const json& v) const {
    if (!v.is_string()) fail(key, "a string", v);
    return v.get<std::string>();
  }

  int64_t as_int(std::string_view key, const json& v) const {
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

  // A JSON array (else `expected` is the message), each element converted by `as` under the
  // name "key[i]".
  template <typename As>
  auto as_list(std::string_view key, const json& v, const char* expected, As as) const {
    using Element = std::invoke_result_t<As, const FieldReader&, std::string_view, const json&>;
    if (!v.is_array()) fail(key, expected, v);
    std::vector<Element> out;
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(std::invoke(as, *this, fmt::format("{}[{}]", key, i), v[i]));
    return out;
  }

  [[noreturn]] void fail(std::string_view key, const char* expected, const json& v) const {
    const std::string shown = v.is_number() ? v.dump() : std::string(v.type_name());
    DI_FAIL("{} `{}` must be {}, got {}", where_, key, expected, shown);
  }

 private:
  const json& obj_;
  std::string where_;
};

uint64_t as_seed(const FieldReader& r, std::string_view key, const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  // Negative seeds (OpenAI allows any int64) are taken modulo 2^64.
  return static_cast<uint64_t>(r.as_int(key, v));
}

std::vector<std::string> as_stop(const FieldReader& r, std::string_view key, const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  return r.as_list(key, v, "a string or a list of strings", &FieldReader::as_string);
}

std::vector<int64_t> as_int_list(const FieldReader& r, std::string_view key, const json& v) {
  return r.as_list(key, v, "a list of integers", &FieldReader::as_int);
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
  r.read("seed", p.seed, as_seed);
  r.read("stop", p.stop, as_stop);
  r.read("stop_token_ids", p.stop_token_ids, as_int_list);
  r.read_bool("ignore_eos", p.ignore_eos);
  r.read_bool("include_stop_str_in_output", p.include_stop_str_in_output);
  r.read_bool("skip_special_tokens", p.skip_special_tokens);
  read_logprobs(r, p);
  r.read("prompt_logprobs", p.prompt_logprobs, &FieldReader::as_int);
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
