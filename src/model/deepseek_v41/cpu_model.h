#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "engram/token_map.h"
#include "model/forward_api.h"

namespace di {

// Loads a DeepSeek-V4.1 checkpoint directory for the CPU reference backend.
// `token_map`: the Engram compressed token map; when absent it is read from the model
// directory's engram_token_map.safetensors (models with Engram layers need one or the other).
std::unique_ptr<ForwardModel> load_cpu_forward_model(
    const std::filesystem::path& model_dir, const ForwardOptions& options,
    std::optional<CompressedTokenMap> token_map = std::nullopt);

}  // namespace di
