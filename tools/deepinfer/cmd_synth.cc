// deepinfer synth: writes a synthetic checkpoint in the exact release format.

#include <chrono>

#include "commands.h"
#include "common/logging.h"
#include "model/model_stats.h"
#include "model/synth.h"

namespace di::cli {

Command add_synth(CLI::App& root) {
  auto opt = std::make_shared<SynthOptions>();
  auto layers = std::make_shared<int64_t>(-1);
  auto experts = std::make_shared<int64_t>(-1);
  auto draft = std::make_shared<int64_t>(-1);
  auto no_vision = std::make_shared<bool>(false);
  auto shard_mib = std::make_shared<uint64_t>(5120);
  auto max_dense_mib = std::make_shared<uint64_t>(16384);
  CLI::App* app = root.add_subcommand(
      "synth", "Write a synthetic checkpoint (random weights, release layout) at any scale");
  app->add_option("--config", opt->config,
                  "v41-flash | v4-flash | v41-tiny | path to a config.json")
      ->required();
  app->add_option("--out", opt->out, "output directory (created; must be empty)")->required();
  auto layers_opt = app->add_option("--layers", *layers, "backbone layers to keep (default: all)");
  app->add_option("--layer-ids", opt->layer_ids,
                  "V4.1: the backbone layers to keep by id, e.g. 0,1,2,3,20,21,24,25 (a few of "
                  "each role; every kept layer's kv/index/candidate source too)")
      ->delimiter(',')
      ->excludes(layers_opt);
  app->add_option("--experts", *experts, "routed experts per layer (default: all)");
  app->add_option("--draft-blocks", *draft, "MTP/DSpark blocks (default: as configured)");
  app->add_option("--seed", opt->seed, "random seed (same seed, same bytes)");
  app->add_flag("--no-vision", *no_vision, "drop the vision tower (V4.1)");
  app->add_option("--shard-mib", *shard_mib, "target shard size in MiB")
      ->check(CLI::PositiveNumber);
  app->add_option("--max-dense-mib", *max_dense_mib,
                  "tensors larger than this are written as sparse all-zero holes")
      ->check(CLI::PositiveNumber);
  return {app, [=]() {
            if (*layers >= 0) opt->layers = *layers;
            if (*experts >= 0) opt->experts = *experts;
            if (*draft >= 0) opt->draft_blocks = *draft;
            opt->vision = !*no_vision;
            opt->shard_bytes = *shard_mib << 20;
            opt->max_dense_tensor_bytes = *max_dense_mib << 20;
            const auto t0 = std::chrono::steady_clock::now();
            SynthResult r = synthesize_checkpoint(*opt);
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            fmt::print("wrote {} tensors in {} shards to {}: {} payload ({} sparse) in {:.1f} s\n",
                       r.tensors, r.shards, opt->out.string(), format_bytes(r.payload_bytes),
                       format_bytes(r.sparse_bytes), s);
            return 0;
          }};
}

}  // namespace di::cli
