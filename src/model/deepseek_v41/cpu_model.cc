#include "model/deepseek_v41/cpu_model.h"

#include "common/check.h"
#include "common/logging.h"
#include "engram/token_map.h"
#include "model/catalogue_check.h"
#include "model/deepseek_v41/model.h"
#include "model/weight_catalogue.h"

namespace di {

std::optional<CompressedTokenMap> resolve_engram_token_map(
    const ModelConfig& cfg, const std::filesystem::path& model_dir,
    std::optional<CompressedTokenMap> token_map) {
  if (cfg.engram_layer_ids.empty()) return std::nullopt;
  if (token_map) {
    DI_CHECK(token_map->compressed_vocab_size() == cfg.engram_compressed_vocab_size &&
                 token_map->vocab_size() >= cfg.vocab_size,
             "{}: Engram token map from {} has {} ids / {} classes; the config needs {} / {}",
             model_dir.string(), token_map->source(), token_map->vocab_size(),
             token_map->compressed_vocab_size(), cfg.vocab_size, cfg.engram_compressed_vocab_size);
    return token_map;
  }
  const auto file = model_dir / kEngramTokenMapFile;
  DI_CHECK(std::filesystem::exists(file),
           "{}: the model has Engram layers but {} is missing (the engine derives it from the "
           "tokenizer; this loader was given neither)",
           model_dir.string(), kEngramTokenMapFile);
  return CompressedTokenMap::load_file(file, cfg.engram_compressed_vocab_size);
}

std::shared_ptr<const Checkpoint> open_v41_checkpoint(const std::filesystem::path& model_dir,
                                                      const ModelConfig& cfg,
                                                      std::string_view backend) {
  DI_CHECK(cfg.is_v41(), "{}: the {} backend runs DeepSeek-V4.1 models; this is {}",
           model_dir.string(), backend, model_family_name(cfg.family));
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::open(model_dir));
  // Validate the whole checkpoint before binding anything: every mismatch at once.
  throw_if_problems(check_catalogue(*ckpt, build_weight_catalogue(cfg)), model_dir.string());
  return ckpt;
}

std::unique_ptr<ForwardModel> load_cpu_forward_model(const std::filesystem::path& model_dir,
                                                     const ForwardOptions& options,
                                                     std::optional<CompressedTokenMap> token_map) {
  ModelConfig cfg = load_model_config(model_dir);
  auto ckpt = open_v41_checkpoint(model_dir, cfg, "CPU reference");
  token_map = resolve_engram_token_map(cfg, model_dir, std::move(token_map));
  // kBf16 runs on the float model with bf16 rounding of the activations.
  if (options.precision == Precision::kFp64) {
    return std::make_unique<v41::Model<double>>(std::move(ckpt), std::move(cfg), options,
                                                std::move(token_map));
  }
  return std::make_unique<v41::Model<float>>(std::move(ckpt), std::move(cfg), options,
                                             std::move(token_map));
}

}  // namespace di
