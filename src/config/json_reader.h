#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/check.h"

namespace di::config_detail {

// Reads typed values out of one JSON object, remembering which keys were consumed so the
// caller can warn about every unknown key. `where` names the file and section in messages.
class JsonReader {
 public:
  JsonReader(const nlohmann::json& obj, std::string where);

  bool has(std::initializer_list<const char*> names) const;
  // The first of `names` present (aliases: HF name, reference name), or nullptr.
  const nlohmann::json* find(std::initializer_list<const char*> names);

  int64_t req_int(std::initializer_list<const char*> names);
  int64_t opt_int(std::initializer_list<const char*> names, int64_t fallback);
  std::optional<int64_t> maybe_int(std::initializer_list<const char*> names);
  double req_double(std::initializer_list<const char*> names);
  double opt_double(std::initializer_list<const char*> names, double fallback);
  bool opt_bool(std::initializer_list<const char*> names, bool fallback);
  std::string opt_string(std::initializer_list<const char*> names, const std::string& fallback);
  std::vector<int64_t> req_int_list(std::initializer_list<const char*> names);
  std::vector<int64_t> opt_int_list(std::initializer_list<const char*> names);
  // Nested object (marks the key consumed); nullptr when absent.
  const nlohmann::json* object(const char* name);
  // Marks keys as known-and-ignored (metadata such as transformers_version).
  void ignore(std::initializer_list<const char*> names);
  // One "unknown key" warning per key not consumed.
  std::vector<std::string> unknown_key_warnings() const;
  const std::string& where() const { return where_; }

 private:
  [[noreturn]] void fail_type(const char* name, const char* expected) const;
  [[noreturn]] void fail_missing(std::initializer_list<const char*> names) const;
  int64_t as_int(const char* name, const nlohmann::json& v) const;
  double as_double(const char* name, const nlohmann::json& v) const;
  const char* last_name_ = nullptr;
  const nlohmann::json& obj_;
  std::string where_;
  std::set<std::string> consumed_;
};

}  // namespace di::config_detail
