#include "config/json_reader.h"

#include <cmath>

namespace di::config_detail {

JsonReader::JsonReader(const nlohmann::json& obj, std::string where)
    : obj_(obj), where_(std::move(where)) {
  DI_CHECK(obj.is_object(), "{}: expected a JSON object", where_);
}

bool JsonReader::has(std::initializer_list<const char*> names) const {
  for (const char* n : names) {
    if (obj_.contains(n)) return true;
  }
  return false;
}

const nlohmann::json* JsonReader::find(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = obj_.find(n);
    if (it != obj_.end()) {
      consumed_.insert(n);
      last_name_ = n;
      return &*it;
    }
  }
  return nullptr;
}

void JsonReader::fail_type(const char* name, const char* expected) const {
  DI_FAIL("{}: key '{}' must be {}, got {}", where_, name, expected, obj_.at(name).dump());
}

void JsonReader::fail_missing(std::initializer_list<const char*> names) const {
  std::string list;
  for (const char* n : names)
    list += fmt::format("{}'{}'", list.empty() ? "" : " or ", n);
  DI_FAIL("{}: required key {} is missing", where_, list);
}

int64_t JsonReader::as_int(const char* name, const nlohmann::json& v) const {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) fail_type(name, "an integer within int64");
    return static_cast<int64_t>(u);
  }
  // Integral floats (e.g. 65536.0) are accepted; anything else is a type error.
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
  }
  fail_type(name, "an integer");
}

double JsonReader::as_double(const char* name, const nlohmann::json& v) const {
  if (!v.is_number()) fail_type(name, "a number");
  return v.get<double>();
}

int64_t JsonReader::req_int(std::initializer_list<const char*> names) {
  const nlohmann::json* v = find(names);
  if (v == nullptr) fail_missing(names);
  return as_int(last_name_, *v);
}

int64_t JsonReader::opt_int(std::initializer_list<const char*> names, int64_t fallback) {
  const nlohmann::json* v = find(names);
  if (v == nullptr || v->is_null()) return fallback;
  return as_int(last_name_, *v);
}

std::optional<int64_t> JsonReader::maybe_int(std::initializer_list<const char*> names) {
  const nlohmann::json* v = find(names);
  if (v == nullptr || v->is_null()) return std::nullopt;
  return as_int(last_name_, *v);
}

double JsonReader::req_double(std::initializer_list<const char*> names) {
  const nlohmann::json* v = find(names);
  if (v == nullptr) fail_missing(names);
  return as_double(last_name_, *v);
}

double JsonReader::opt_double(std::initializer_list<const char*> names, double fallback) {
  const nlohmann::json* v = find(names);
  if (v == nullptr || v->is_null()) return fallback;
  return as_double(last_name_, *v);
}

bool JsonReader::opt_bool(std::initializer_list<const char*> names, bool fallback) {
  const nlohmann::json* v = find(names);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_boolean()) fail_type(last_name_, "a boolean");
  return v->get<bool>();
}

std::string JsonReader::opt_string(std::initializer_list<const char*> names,
                                   const std::string& fallback) {
  const nlohmann::json* v = find(names);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_string()) fail_type(last_name_, "a string");
  return v->get<std::string>();
}

std::vector<int64_t> JsonReader::req_int_list(std::initializer_list<const char*> names) {
  const nlohmann::json* v = find(names);
  if (v == nullptr) fail_missing(names);
  const char* name = last_name_;
  if (!v->is_array()) fail_type(name, "a list of integers");
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (const auto& e : *v)
    out.push_back(as_int(name, e));
  return out;
}

std::vector<int64_t> JsonReader::opt_int_list(std::initializer_list<const char*> names) {
  if (!has(names)) return {};
  const nlohmann::json* v = find(names);
  if (v->is_null()) return {};
  return req_int_list(names);
}

const nlohmann::json* JsonReader::object(const char* name) {
  auto it = obj_.find(name);
  if (it == obj_.end() || it->is_null()) {
    if (it != obj_.end()) consumed_.insert(name);
    return nullptr;
  }
  consumed_.insert(name);
  if (!it->is_object()) fail_type(name, "an object");
  return &*it;
}

void JsonReader::ignore(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (obj_.contains(n)) consumed_.insert(n);
  }
}

std::vector<std::string> JsonReader::unknown_key_warnings() const {
  std::vector<std::string> out;
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (!consumed_.contains(it.key())) {
      out.push_back(fmt::format("{}: unknown key '{}' ignored", where_, it.key()));
    }
  }
  return out;
}

}  // namespace di::config_detail
