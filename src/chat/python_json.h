#pragma once

#include <string>

#include "chat/message.h"

namespace di::chat {

// Serialises like Python's json.dumps(value, ensure_ascii=False), which the official encoders use
// for tool schemas, response formats and non-string call arguments: ", " and ": " separators,
// non-ASCII characters kept raw, control characters escaped (\n, \t, ... or \u00XX), floats in
// Python's repr form (1.0, 1e-05, 1e+16). Object keys keep their insertion order.
std::string python_json_dumps(const Json& value);

}  // namespace di::chat
