#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"

namespace di {

// The release config.json of a named preset ("v41-flash", "v4-flash"), compiled into the binary.
// Throws di::Error for unknown names.
nlohmann::json preset_config_json(std::string_view name);
// Preset name or path of a config.json file.
nlohmann::json load_config_json(const std::string& preset_or_path);

// The reference's flat inference/config.json (ModelArgs names) for a config.
nlohmann::json to_reference_config_json(const ModelConfig& cfg);

struct SynthOptions {
  std::string config = "v41-flash";  // preset name or config.json path
  std::optional<int64_t> layers;     // backbone layers kept (source/engram/tap ids remapped)
  // V4.1: the backbone layers kept, by original id (e.g. a few of each role); every kept layer's
  // kv/index/candidate source must be kept too. Exclusive with `layers`.
  std::vector<int64_t> layer_ids;
  std::optional<int64_t> experts;       // routed experts per layer (draft experts capped by it)
  std::optional<int64_t> draft_blocks;  // num_nextn_predict_layers
  bool vision = true;                   // keep vision_config (V4.1)
  uint64_t seed = 0;
  std::filesystem::path out;
  uint64_t shard_bytes = 5ull << 30;  // target shard size (a tensor never spans shards)
  // Tensors larger than this are written as sparse holes (all-zero bytes, no disk blocks), so
  // the 92 GiB Engram tables of a real-dimension V4.1 checkpoint cost no disk space.
  uint64_t max_dense_tensor_bytes = 16ull << 30;
};

struct SynthResult {
  ModelConfig config;
  uint64_t tensors = 0;
  uint64_t payload_bytes = 0;
  uint64_t sparse_bytes = 0;  // payload left as holes
  uint64_t shards = 0;
};

// Applies --layers/--layer-ids/--experts/--draft-blocks/--no-vision to a release config JSON,
// keeping it consistent (compress_ratios cut, source/engram/tap layer lists filtered or remapped,
// engram table sizes re-derived). Returns the modified JSON.
nlohmann::json shrink_config_json(nlohmann::json cfg, const SynthOptions& opt);

// Writes a complete checkpoint directory in the release format: config.json,
// inference/config.json, model-XXXXX-of-YYYYY.safetensors shards and
// model.safetensors.index.json. Payload is generated and written streaming (memory use does
// not depend on the checkpoint size); the same seed gives identical bytes.
SynthResult synthesize_checkpoint(const SynthOptions& opt);

}  // namespace di
