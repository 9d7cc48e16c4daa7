#include "loader/shard_index.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <set>

#include "common/check.h"
#include "loader/strict_json.h"

namespace di {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kShardSuffix = ".safetensors";

// Parses the index JSON, rejecting a repeated key: a tensor listed twice in weight_map must not
// lose one of its shard assignments silently.
Json parse_index_json(std::string_view text, std::string_view label) {
  try {
    return parse_json_rejecting_repeated_keys(text, label, [](const RepeatedKey& r) {
      if (r.depth == 2 && r.owner == "weight_map") {
        return fmt::format("tensor '{}' listed twice in weight_map", r.key);
      }
      if (r.depth == 1) return fmt::format("key '{}' listed twice at the top level", r.key);
      return fmt::format("key '{}' listed twice in object '{}'", r.key, r.owner);
    });
  } catch (const Json::parse_error& e) {
    DI_FAIL("{}: malformed JSON at byte {}: {}", label, e.byte, e.what());
  } catch (const Json::exception& e) {
    DI_FAIL("{}: malformed JSON: {}", label, e.what());
  }
}

// A shard must be a plain file name in the checkpoint directory: an index must not be able to
// point the loader anywhere else.
void check_shard_file_name(const std::string& file, const std::string& tensor,
                           std::string_view label) {
  bool plain = file.find('/') == std::string::npos && file.find('\\') == std::string::npos &&
               file.find('\0') == std::string::npos && file.find("..") == std::string::npos;
  if (!plain) {
    DI_FAIL("{}: weight_map['{}'] = '{}' is not a plain file name", label, tensor, file);
  }
  if (file.size() <= kShardSuffix.size() || !std::string_view(file).ends_with(kShardSuffix)) {
    DI_FAIL("{}: weight_map['{}'] = '{}' does not name a .safetensors file", label, tensor, file);
  }
}

std::optional<uint64_t> parse_total_size(const Json& metadata, std::string_view label) {
  if (!metadata.is_object()) {
    DI_FAIL("{}: 'metadata' must be an object, got {}", label, metadata.type_name());
  }
  auto it = metadata.find("total_size");
  if (it == metadata.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0) {
    return static_cast<uint64_t>(it->get<int64_t>());  // "-0"
  }
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    bool digits_only = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    if (digits_only && ec == std::errc() && ptr == s.data() + s.size()) return v;
  }
  std::string got = it->is_primitive()
                        ? it->dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 64)
                        : it->type_name();
  DI_FAIL("{}: metadata.total_size must be a non-negative integer, got {}", label, got);
}

}  // namespace

ShardIndex parse_shard_index(std::string_view json_text, std::string_view file_label) {
  const std::string_view label = file_label;
  Json root = parse_index_json(json_text, label);
  if (!root.is_object())
    DI_FAIL("{}: index must be a JSON object, got {}", label, root.type_name());

  ShardIndex index;
  if (auto md = root.find("metadata"); md != root.end()) {
    index.total_size = parse_total_size(*md, label);
  }
  auto wm = root.find("weight_map");
  if (wm == root.end()) DI_FAIL("{}: missing 'weight_map'", label);
  if (!wm->is_object()) {
    DI_FAIL("{}: 'weight_map' must be an object, got {}", label, wm->type_name());
  }
  if (wm->empty()) DI_FAIL("{}: 'weight_map' is empty", label);

  std::set<std::string> files;
  for (const auto& [tensor, file] : wm->items()) {
    if (tensor.empty()) DI_FAIL("{}: weight_map has an empty tensor name", label);
    if (!file.is_string()) {
      DI_FAIL("{}: weight_map['{}'] must be a shard file name string, got {}", label, tensor,
              file.type_name());
    }
    const auto& name = file.get_ref<const std::string&>();
    check_shard_file_name(name, tensor, label);
    files.insert(name);
    index.weight_map.emplace(tensor, name);
  }
  index.shard_files.assign(files.begin(), files.end());
  return index;
}

}  // namespace di
