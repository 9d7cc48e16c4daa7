#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "config/model_config.h"
#include "engram/token_map.h"
#include "loader/checkpoint.h"
#include "model/forward_api.h"

namespace di {

// Loads a DeepSeek-V4.1 checkpoint directory for the CPU reference backend.
// `token_map`: the Engram compressed token map; when absent it is read from the model
// directory's engram_token_map.safetensors (models with Engram layers need one or the other).
std::unique_ptr<ForwardModel> load_cpu_forward_model(
    const std::filesystem::path& model_dir, const ForwardOptions& options,
    std::optional<CompressedTokenMap> token_map = std::nullopt);

// Shared by the backends' loaders: the Engram token map a V4.1 model needs (the given one,
// checked against the config, or the model directory's engram_token_map.safetensors; nullopt for
// models without Engram layers), and the checkpoint opened and checked against the catalogue.
std::optional<CompressedTokenMap> resolve_engram_token_map(
    const ModelConfig& cfg, const std::filesystem::path& model_dir,
    std::optional<CompressedTokenMap> token_map);
std::shared_ptr<const Checkpoint> open_v41_checkpoint(const std::filesystem::path& model_dir,
                                                      const ModelConfig& cfg,
                                                      std::string_view backend);

}  // namespace di
