#include "model/deepseek_v41/cpu_model.h"

#include "common/check.h"
#include "common/logging.h"
#include "engram/token_map.h"
#include "model/catalogue_check.h"
#include "model/deepseek_v41/model.h"
#include "model/weight_catalogue.h"

namespace di {

std::unique_ptr<ForwardModel> load_cpu_forward_model(const std::filesystem::path& model_dir,
                                                     const ForwardOptions& options) {
  ModelConfig cfg = load_model_config(model_dir);
  DI_CHECK(cfg.is_v41(), "{}: the CPU reference backend runs DeepSeek-V4.1 models; this is {}",
           model_dir.string(), model_family_name(cfg.family));
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::open(model_dir));
  // Validate the whole checkpoint before binding anything: every mismatch at once.
  throw_if_problems(check_catalogue(*ckpt, build_weight_catalogue(cfg)), model_dir.string());
  std::optional<CompressedTokenMap> token_map;
  if (!cfg.engram_layer_ids.empty()) {
    const auto file = model_dir / kEngramTokenMapFile;
    DI_CHECK(std::filesystem::exists(file),
             "{}: the model has Engram layers but {} is missing (deriving the map from the "
             "tokenizer is not implemented yet)",
             model_dir.string(), kEngramTokenMapFile);
    token_map = CompressedTokenMap::load_file(file, cfg.engram_compressed_vocab_size);
  }
  if (options.precision == Precision::kFp64) {
    return std::make_unique<v41::Model<double>>(std::move(ckpt), std::move(cfg), options,
                                                std::move(token_map));
  }
  return std::make_unique<v41::Model<float>>(std::move(ckpt), std::move(cfg), options,
                                             std::move(token_map));
}

}  // namespace di
