#pragma once

#include <filesystem>
#include <memory>

#include "model/forward_api.h"

namespace di {

// Loads a DeepSeek-V4.1 checkpoint directory for the CPU reference backend.
std::unique_ptr<ForwardModel> load_cpu_forward_model(const std::filesystem::path& model_dir,
                                                     const ForwardOptions& options);

}  // namespace di
