#include "loader/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/check.h"
#include "loader/strict_json.h"

namespace di {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

// A short description of a JSON value for error messages: hostile headers may hold huge or
// deeply nested values, whose dump would be enormous (and recursive).
std::string describe_value(const Json& v) {
  if (!v.is_primitive()) return v.type_name();
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

// A non-negative JSON integer ("-0" included, as other readers accept it).
std::optional<uint64_t> as_unsigned(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

// "3 x 4 F32" (or "scalar F32"): the form used in size-mismatch messages.
std::string describe(const Shape& shape, DType dtype) {
  if (shape.rank() == 0) return fmt::format("scalar {}", dtype_name(dtype));
  return fmt::format("{} {}", fmt::join(shape.dims(), " x "), dtype_name(dtype));
}

// Parses the header JSON, rejecting a repeated key: a tensor listed twice must not have one of its
// entries silently dropped.
Json parse_header_json(std::string_view text, std::string_view label) {
  try {
    return parse_json_rejecting_repeated_keys(text, label, [](const RepeatedKey& r) {
      if (r.depth == 1) return fmt::format("tensor '{}' listed twice in the header", r.key);
      return fmt::format("key '{}' listed twice in the entry of '{}'", r.key, r.owner);
    });
  } catch (const Json::parse_error& e) {
    DI_FAIL("{}: malformed JSON header at byte {} (header is {} bytes): {}", label, e.byte,
            text.size(), e.what());
  } catch (const Json::exception& e) {
    DI_FAIL("{}: malformed JSON header: {}", label, e.what());
  }
}

const Json& require_field(const Json& entry, std::string_view field, std::string_view label,
                          std::string_view name) {
  auto it = entry.find(field);
  if (it == entry.end()) DI_FAIL("{}: tensor '{}': missing field '{}'", label, name, field);
  return *it;
}

DType parse_entry_dtype(const Json& v, std::string_view label, std::string_view name) {
  if (!v.is_string()) {
    DI_FAIL("{}: tensor '{}': field 'dtype' must be a string, got {}", label, name, v.type_name());
  }
  const auto& tag = v.get_ref<const std::string&>();
  std::optional<DType> dtype = parse_dtype(tag);
  if (!dtype) DI_FAIL("{}: tensor '{}': unknown dtype '{}'", label, name, tag);
  return *dtype;
}

Shape parse_entry_shape(const Json& v, std::string_view label, std::string_view name) {
  if (!v.is_array()) {
    DI_FAIL("{}: tensor '{}': field 'shape' must be an array, got {}", label, name, v.type_name());
  }
  std::vector<int64_t> dims;
  dims.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& d = v[i];
    if (std::optional<uint64_t> u = as_unsigned(d)) {
      if (*u > static_cast<uint64_t>(INT64_MAX)) {
        DI_FAIL("{}: tensor '{}': shape[{}] = {} does not fit int64", label, name, i, *u);
      }
      dims.push_back(static_cast<int64_t>(*u));
    } else if (d.is_number_integer()) {
      DI_FAIL("{}: tensor '{}': shape[{}] = {} is negative", label, name, i, d.get<int64_t>());
    } else {
      DI_FAIL("{}: tensor '{}': shape[{}] must be a non-negative integer, got {}", label, name, i,
              describe_value(d));
    }
  }
  Shape shape(std::move(dims));
  if (shape.numel() < 0) {
    DI_FAIL("{}: tensor '{}': shape {} has more elements than int64 can count", label, name, shape);
  }
  return shape;
}

std::pair<uint64_t, uint64_t> parse_entry_offsets(const Json& v, std::string_view label,
                                                  std::string_view name) {
  if (!v.is_array() || v.size() != 2) {
    DI_FAIL("{}: tensor '{}': field 'data_offsets' must be an array [begin, end], got {}", label,
            name, v.is_array() ? fmt::format("{} elements", v.size()) : describe_value(v));
  }
  uint64_t bounds[2] = {0, 0};
  for (size_t i = 0; i < 2; ++i) {
    std::optional<uint64_t> u = as_unsigned(v[i]);
    if (!u) {
      DI_FAIL("{}: tensor '{}': data_offsets[{}] must be a non-negative integer, got {}", label,
              name, i, describe_value(v[i]));
    }
    bounds[i] = *u;
  }
  const uint64_t begin = bounds[0];
  const uint64_t end = bounds[1];
  if (begin > end) {
    DI_FAIL("{}: tensor '{}': data_offsets [{}, {}] has begin > end", label, name, begin, end);
  }
  return {begin, end};
}

TensorInfo parse_entry(const std::string& name, const Json& entry, std::string_view label) {
  if (!entry.is_object()) {
    DI_FAIL("{}: tensor '{}': entry must be an object, got {}", label, name, entry.type_name());
  }
  TensorInfo info;
  info.name = name;
  info.dtype = parse_entry_dtype(require_field(entry, "dtype", label, name), label, name);
  info.shape = parse_entry_shape(require_field(entry, "shape", label, name), label, name);
  std::tie(info.begin, info.end) =
      parse_entry_offsets(require_field(entry, "data_offsets", label, name), label, name);

  uint64_t needed = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(info.shape.numel()),
                             static_cast<uint64_t>(dtype_size(info.dtype)), &needed)) {
    DI_FAIL("{}: tensor '{}': {} needs more than 2^64 bytes", label, name,
            describe(info.shape, info.dtype));
  }
  if (info.end - info.begin != needed) {
    DI_FAIL("{}: tensor '{}': {} needs {} bytes, data_offsets span {}", label, name,
            describe(info.shape, info.dtype), needed, info.end - info.begin);
  }
  return info;
}

std::map<std::string, std::string> parse_metadata(const Json& v, std::string_view label) {
  if (!v.is_object()) {
    DI_FAIL("{}: {} must be an object of strings, got {}", label, kMetadataKey, v.type_name());
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      DI_FAIL("{}: {}['{}'] must be a string, got {}", label, kMetadataKey, key, value.type_name());
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// `tensors` sorted by begin: they must tile [0, data_size) exactly.
void check_layout(const std::vector<TensorInfo>& tensors, uint64_t data_size,
                  std::string_view label) {
  // Find the first hole or overlap without throwing yet: when the tiling is otherwise perfect but
  // runs past the data section, the file is truncated, which deserves its own message.
  std::string layout_problem;
  uint64_t covered = 0;  // end of the contiguous prefix [0, covered)
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin > covered) {
      layout_problem =
          prev == nullptr
              ? fmt::format("{}: first tensor '{}' data_offsets [{}, {}] begins at {}, not 0",
                            label, t.name, t.begin, t.end, t.begin)
              : fmt::format(
                    "{}: hole of {} bytes in the data section between tensor '{}' "
                    "(ends at {}) and tensor '{}' data_offsets [{}, {}]",
                    label, t.begin - covered, prev->name, covered, t.name, t.begin, t.end);
      break;
    }
    if (t.begin < covered) {
      layout_problem = fmt::format(
          "{}: tensor '{}' data_offsets [{}, {}] overlaps tensor '{}' data_offsets [{}, {}]", label,
          t.name, t.begin, t.end, prev->name, prev->begin, prev->end);
      break;
    }
    covered = t.end;
    prev = &t;
  }

  auto beyond = std::find_if(tensors.begin(), tensors.end(),
                             [&](const TensorInfo& t) { return t.end > data_size; });
  if (beyond != tensors.end()) {
    if (layout_problem.empty()) {
      DI_FAIL(
          "{}: truncated: data section has {} bytes but tensors need {} (tensor '{}' "
          "data_offsets [{}, {}] extends past the end of the file)",
          label, data_size, covered, beyond->name, beyond->begin, beyond->end);
    }
    DI_FAIL("{}: tensor '{}': data_offsets [{}, {}] lie outside the data section of {} bytes",
            label, beyond->name, beyond->begin, beyond->end, data_size);
  }
  if (!layout_problem.empty()) DI_FAIL("{}", layout_problem);
  if (covered != data_size) {
    DI_FAIL("{}: data section has {} bytes but tensors cover only {} ({} trailing bytes)", label,
            data_size, covered, data_size - covered);
  }
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const std::byte> file, std::string_view file_label) {
  const std::string_view label = file_label;
  const uint64_t file_size = file.size();
  if (file_size < 8) {
    DI_FAIL("{}: file has {} bytes, too short for the 8-byte header length", label, file_size);
  }
  SafetensorsHeader header;
  header.header_len = read_le64(file.data());
  if (header.header_len == 0) DI_FAIL("{}: header length is 0", label);
  if (header.header_len > kMaxSafetensorsHeaderBytes) {
    DI_FAIL("{}: header length {} exceeds the limit of {} bytes", label, header.header_len,
            kMaxSafetensorsHeaderBytes);
  }
  if (header.header_len > file_size - 8) {
    DI_FAIL("{}: header length {} beyond the file size {}", label, header.header_len, file_size);
  }
  header.data_offset = 8 + header.header_len;
  const uint64_t data_size = file_size - header.data_offset;

  std::string_view text(reinterpret_cast<const char*>(file.data()) + 8,
                        static_cast<size_t>(header.header_len));
  Json root = parse_header_json(text, label);
  if (!root.is_object())
    DI_FAIL("{}: header must be a JSON object, got {}", label, root.type_name());

  header.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      header.metadata = parse_metadata(entry, label);
      continue;
    }
    header.tensors.push_back(parse_entry(name, entry, label));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  check_layout(header.tensors, data_size, label);
  return header;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  header_ = parse_safetensors(file_.bytes(), path);
  for (size_t i = 0; i < header_.tensors.size(); ++i)
    by_name_.emplace(header_.tensors[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

ConstTensorView SafetensorsFile::view(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) DI_FAIL("{}: no tensor '{}'", path(), name);
  return view(*info);
}

ConstTensorView SafetensorsFile::view(const TensorInfo& info) const {
  DI_CHECK(header_.data_offset + info.end <= file_.size(), "{}: tensor '{}' is not of this file",
           path(), info.name);
  return {file_.data() + header_.data_offset + info.begin, info.dtype, info.shape};
}

}  // namespace di
