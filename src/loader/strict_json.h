#pragma once

// JSON parsing for checkpoint files that rejects a key repeated within one object. nlohmann keeps
// the last of repeated keys silently, so a tensor listed twice (in a safetensors header or in
// weight_map) would quietly lose one of its entries.

#include <cstddef>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace di {

// A key found a second time in one JSON object.
struct RepeatedKey {
  std::string_view key;
  std::string_view owner;  // the key under which the object sits; "" for the top-level object
  size_t depth = 0;        // 1: the top-level object
};

// Parses `text` like nlohmann::json::parse. A repeated key throws di::Error
// "<label>: <describe(repeat)>"; malformed JSON throws nlohmann's exceptions (parse_error with
// the byte offset), which callers turn into their own messages.
nlohmann::json parse_json_rejecting_repeated_keys(
    std::string_view text, std::string_view label,
    const std::function<std::string(const RepeatedKey&)>& describe);

}  // namespace di
