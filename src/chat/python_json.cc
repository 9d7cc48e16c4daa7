#include "chat/python_json.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace di::chat {
namespace {

void append_string(std::string& out, const std::string& s) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

// Python float repr: the shortest round-trip digits, positional for exponents in [-4, 16),
// scientific ("1e-05", "1.5e+16") otherwise; integral values keep a trailing ".0".
void append_float(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "Infinity" : "-Infinity";
    return;
  }
  // Shortest digits via %.17g trimmed to the fewest that round-trip.
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // buf = [-]d.ddde[+-]XX
  std::string sci(buf);
  const size_t e_pos = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (sci[i] >= '0' && sci[i] <= '9') digits.push_back(sci[i]);
  }
  const bool negative = v < 0 || (v == 0 && std::signbit(v));
  // Built with append() only: GCC 12 reports a false -Wrestrict on chained string operator+.
  std::string body;
  const size_t e = static_cast<size_t>(exponent < 0 ? -exponent : exponent);
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      body.append("0.");
      body.append(e - 1, '0');
      body.append(digits);
    } else if (e + 1 >= digits.size()) {
      body.append(digits);
      body.append(e + 1 - digits.size(), '0');
      body.append(".0");
    } else {
      body.append(digits, 0, e + 1);
      body.push_back('.');
      body.append(digits, e + 1, std::string::npos);
    }
  } else {
    body.push_back(digits[0]);
    if (digits.size() > 1) {
      body.push_back('.');
      body.append(digits, 1, std::string::npos);
    }
    body.append(fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', e));
  }
  if (negative) out.push_back('-');
  out += body;
}

void append(std::string& out, const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      out += "null";
      break;
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case Json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      break;
    case Json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      break;
    case Json::value_t::number_float:
      append_float(out, v.get<double>());
      break;
    case Json::value_t::string:
      append_string(out, v.get_ref<const std::string&>());
      break;
    case Json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const Json& item : v) {
        if (!first) out += ", ";
        first = false;
        append(out, item);
      }
      out.push_back(']');
      break;
    }
    case Json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        append_string(out, it.key());
        out += ": ";
        append(out, it.value());
      }
      out.push_back('}');
      break;
    }
    default:
      out += "null";
      break;  // binary / discarded never reach the encoders
  }
}

}  // namespace

std::string python_json_dumps(const Json& value) {
  std::string out;
  append(out, value);
  return out;
}

}  // namespace di::chat
