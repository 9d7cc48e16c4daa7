#pragma once

#include <string>

#include "config/model_config.h"
#include "model/layer_plan.h"
#include "model/model_stats.h"

namespace di::testing_states {

// StateBytes of a config in the repository (configs/v41-flash.json, tests/data/v41-micro.json).
inline StateBytes state_of(const std::string& rel_path) {
  const ModelConfig cfg = load_model_config_file(std::string(DI_SOURCE_DIR) + "/" + rel_path);
  return compute_state_bytes(cfg, build_layer_plan(cfg));
}

}  // namespace di::testing_states
