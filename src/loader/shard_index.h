#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace di {

// model.safetensors.index.json: {"metadata": {"total_size": N, ...}, "weight_map": {name: file}}.
struct ShardIndex {
  std::map<std::string, std::string, std::less<>> weight_map;  // tensor name -> shard file name
  std::vector<std::string> shard_files;                        // distinct shard file names, sorted
  std::optional<uint64_t> total_size;                          // metadata.total_size when present
};

// Parses and validates the index text. Errors (malformed JSON, missing/ill-typed weight_map,
// a tensor name listed twice, a shard file name with a path separator or not ending in
// .safetensors) throw di::Error starting with `file_label`.
ShardIndex parse_shard_index(std::string_view json_text, std::string_view file_label);

}  // namespace di
