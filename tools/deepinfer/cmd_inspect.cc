// deepinfer inspect: validates a checkpoint against the catalogue of its config and prints the
// layer plan, parameter/byte accounting, KV/state sizes and expert-parallel memory.

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/check.h"
#include "config/model_config.h"
#include "loader/checkpoint.h"
#include "model/catalogue_check.h"
#include "model/model_stats.h"
#include "model/weight_catalogue.h"

namespace di::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;  // sorted keys (not the ordered_json of generate/chat)

struct InspectOptions {
  std::string path;
  bool json_out = false;
  int ep = 1;
  bool verify_scales = false;
};

std::string plan_ids(int64_t v) {
  return v < 0 ? "-" : std::to_string(v);
}

Json totals_json(const WeightCatalogue::Totals& t) {
  return {{"tensors", t.tensors}, {"params", t.params}, {"bytes", t.bytes}};
}

Json build_report(const ModelConfig& cfg, const WeightCatalogue& cat, const InspectOptions& o) {
  Json j;
  j["family"] = std::string(model_family_name(cfg.family));
  j["config"] = cfg.source;
  j["blocks"] = cfg.num_blocks();
  Json plan = Json::array();
  const auto per_block = cat.by_block();
  for (const LayerPlan& p : cat.plan()) {
    plan.push_back({{"block", p.index},
                    {"prefix", p.prefix},
                    {"ratio", p.compress_ratio},
                    {"mode", std::string(attn_mode_name(p.mode))},
                    {"kv_source", p.kv_source},
                    {"index_source", p.index_source},
                    {"candidate", p.candidate_builder  ? "builds"
                                  : p.candidate_reader ? "reads"
                                                       : ""},
                    {"engram", p.engram_slot >= 0},
                    {"hash_routed", p.hash_routed},
                    {"experts", p.n_routed_experts},
                    {"tensors", per_block[static_cast<size_t>(p.index)].tensors},
                    {"bytes", per_block[static_cast<size_t>(p.index)].bytes}});
  }
  j["layer_plan"] = plan;
  j["total"] = totals_json(cat.total());
  Json groups = Json::object();
  const auto by_group = cat.by_group();
  for (int g = 0; g < kNumWeightGroups; ++g) {
    groups[std::string(weight_group_name(static_cast<WeightGroup>(g)))] =
        totals_json(by_group[static_cast<size_t>(g)]);
  }
  j["groups"] = groups;
  Json dtypes = Json::object();
  for (const auto& [dt, t] : cat.by_dtype())
    dtypes[std::string(dtype_name(dt))] = totals_json(t);
  j["dtypes"] = dtypes;
  const StateBytes st = compute_state_bytes(cfg, cat.plan());
  Json owners = Json::array();
  for (const auto& ow : st.owners) {
    owners.push_back({{"block", ow.block},
                      {"ratio", ow.ratio},
                      {"kv_entry_bytes", ow.kv_entry_bytes},
                      {"index_entry_bytes", ow.index_entry_bytes}});
  }
  Json per_seq = Json::object();
  for (int64_t n : {4096LL, 65536LL, 1048576LL})
    per_seq[std::to_string(n)] = st.sequence_bytes(n);
  j["state"] = {{"window", st.window},
                {"swa_entry_bytes", st.swa_entry_bytes},
                {"swa_blocks", st.swa_blocks},
                {"swa_bytes_per_sequence", st.swa_bytes()},
                {"compressor_tail_bytes_per_sequence", st.compressor_tail_bytes},
                {"engram_history_bytes_per_sequence", st.engram_history_bytes},
                {"fixed_bytes_per_sequence", st.fixed_bytes()},
                {"kv_bytes_per_token", st.bytes_per_token()},
                {"owners", owners},
                {"bytes_per_sequence_at_tokens", per_seq}};
  const EpPlan ep = plan_expert_parallel(cat, o.ep);
  Json ranks = Json::array();
  for (const auto& r : ep.per_rank) {
    ranks.push_back({{"rank", r.rank},
                     {"replicated_bytes", r.replicated_bytes},
                     {"routed_expert_bytes", r.routed_expert_bytes},
                     {"device_bytes", r.device_bytes()}});
  }
  j["expert_parallel"] = {
      {"ranks", o.ep}, {"host_engram_table_bytes", ep.host_engram_bytes}, {"per_rank", ranks}};
  return j;
}

void print_text(const Json& j) {
  fmt::print("{} model, {} blocks (config: {})\n", j["family"].get<std::string>(),
             j["blocks"].get<int64_t>(), j["config"].get<std::string>());
  if (j.contains("checkpoint")) {
    const Json& c = j["checkpoint"];
    fmt::print("checkpoint: {} shard(s){}, {} tensors, {}\n", c["shards"].get<int64_t>(),
               c["indexed"].get<bool>() ? " with index" : "", c["tensors"].get<uint64_t>(),
               format_bytes(c["bytes"].get<uint64_t>()));
    fmt::print("validation: {}\n", j["validation"]["ok"].get<bool>()
                                       ? "OK: every tensor matches the catalogue"
                                       : "FAILED (see above)");
  }
  fmt::print(
      "\nlayer plan\n{:>5}  {:<10} {:>5}  {:<8} {:>4} {:>4}  {:<7} {:<6} {:>7} {:>8} {:>12}\n",
      "block", "prefix", "ratio", "mode", "kv", "idx", "pool", "engram", "experts", "tensors",
      "bytes");
  for (const Json& p : j["layer_plan"]) {
    fmt::print("{:>5}  {:<10} {:>5}  {:<8} {:>4} {:>4}  {:<7} {:<6} {:>7} {:>8} {:>12}\n",
               p["block"].get<int64_t>(), p["prefix"].get<std::string>(), p["ratio"].get<int64_t>(),
               p["mode"].get<std::string>(), plan_ids(p["kv_source"].get<int64_t>()),
               plan_ids(p["index_source"].get<int64_t>()), p["candidate"].get<std::string>(),
               p["engram"].get<bool>() ? "yes" : (p["hash_routed"].get<bool>() ? "hash" : ""),
               p["experts"].get<int64_t>(), p["tensors"].get<uint64_t>(),
               format_bytes(p["bytes"].get<uint64_t>()));
  }
  fmt::print("\nparameters by group\n{:<18} {:>8} {:>18} {:>14}\n", "group", "tensors", "params",
             "bytes");
  for (const auto& [name, t] : j["groups"].items()) {
    fmt::print("{:<18} {:>8} {:>18} {:>14}\n", name, t["tensors"].get<uint64_t>(),
               t["params"].get<uint64_t>(), format_bytes(t["bytes"].get<uint64_t>()));
  }
  const Json& tot = j["total"];
  fmt::print("{:<18} {:>8} {:>18} {:>14}\n", "total", tot["tensors"].get<uint64_t>(),
             tot["params"].get<uint64_t>(), format_bytes(tot["bytes"].get<uint64_t>()));
  fmt::print("\nbytes by dtype\n");
  for (const auto& [name, t] : j["dtypes"].items()) {
    fmt::print("{:<10} {:>8} tensors {:>14}\n", name, t["tensors"].get<uint64_t>(),
               format_bytes(t["bytes"].get<uint64_t>()));
  }
  const Json& s = j["state"];
  fmt::print("\nKV / state per sequence\n");
  fmt::print("  SWA rings: {} blocks x {} slots x {} B = {}\n", s["swa_blocks"].get<int64_t>(),
             s["window"].get<int64_t>(), s["swa_entry_bytes"].get<int64_t>(),
             format_bytes(s["swa_bytes_per_sequence"].get<uint64_t>()));
  for (const Json& ow : s["owners"]) {
    fmt::print("  compressed KV owner block {} (ratio {}): {} B KV + {} B index key per entry\n",
               ow["block"].get<int64_t>(), ow["ratio"].get<int64_t>(),
               ow["kv_entry_bytes"].get<int64_t>(), ow["index_entry_bytes"].get<int64_t>());
  }
  fmt::print("  growing KV: {:.1f} B/token; compressor tails {}; Engram history {}\n",
             s["kv_bytes_per_token"].get<double>(),
             format_bytes(s["compressor_tail_bytes_per_sequence"].get<uint64_t>()),
             format_bytes(s["engram_history_bytes_per_sequence"].get<uint64_t>()));
  for (const auto& [n, b] : s["bytes_per_sequence_at_tokens"].items()) {
    fmt::print("  one sequence of {:>7} tokens: {}\n", n, format_bytes(b.get<uint64_t>()));
  }
  const Json& ep = j["expert_parallel"];
  fmt::print("\nexpert parallel over {} device(s) (Engram tables host-resident: {})\n",
             ep["ranks"].get<int>(), format_bytes(ep["host_engram_table_bytes"].get<uint64_t>()));
  for (const Json& r : ep["per_rank"]) {
    fmt::print("  rank {}: {} replicated + {} routed experts = {} of weights\n",
               r["rank"].get<int>(), format_bytes(r["replicated_bytes"].get<uint64_t>()),
               format_bytes(r["routed_expert_bytes"].get<uint64_t>()),
               format_bytes(r["device_bytes"].get<uint64_t>()));
  }
}

int run_inspect(const InspectOptions& o) {
  const fs::path path(o.path);
  DI_CHECK(fs::exists(path), "{}: no such file or directory", o.path);
  const bool config_only = fs::is_regular_file(path);
  const ModelConfig cfg = config_only ? load_model_config_file(path) : load_model_config(path);
  const WeightCatalogue cat = build_weight_catalogue(cfg);
  Json j = build_report(cfg, cat, o);
  bool ok = true;
  if (!config_only) {
    const Checkpoint ckpt = Checkpoint::open(path);
    CatalogueReport rep = check_catalogue(ckpt, cat);
    if (o.verify_scales) check_scale_bytes(ckpt, cat, rep);
    ok = rep.ok();
    j["checkpoint"] = {{"dir", path.string()},
                       {"shards", ckpt.shard_files().size()},
                       {"indexed", ckpt.has_index()},
                       {"tensors", ckpt.num_tensors()},
                       {"bytes", ckpt.total_bytes()}};
    Json problems = Json::array();
    for (const auto& p : rep.problems)
      problems.push_back(p.message);
    j["validation"] = {{"ok", ok},
                       {"checked", rep.checked},
                       {"scale_bytes_scanned", rep.scale_bytes_scanned},
                       {"problems", problems}};
    if (!ok) {
      std::fprintf(stderr, "error: %s does not match the %s catalogue: %zu problem(s)\n%s",
                   path.string().c_str(), std::string(model_family_name(cfg.family)).c_str(),
                   rep.problems.size(), rep.to_string().c_str());
    }
  }
  if (o.json_out) {
    fmt::print("{}\n", j.dump(2));
  } else {
    print_text(j);
  }
  return ok ? 0 : 1;
}

}  // namespace

Command add_inspect(CLI::App& root) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* app = root.add_subcommand(
      "inspect", "Validate a checkpoint (or a config file alone) and print its accounting");
  app->add_option("MODEL_DIR", o->path, "model directory, or a config.Json for catalogue only")
      ->required();
  app->add_flag("--json", o->json_out, "print the report as JSON");
  app->add_option("--ep", o->ep, "expert-parallel devices for the memory plan")
      ->check(CLI::Range(1, 4096));
  app->add_flag("--verify-scales", o->verify_scales,
                "also scan every E8M0 scale payload for NaN (0xFF) bytes");
  return {app, [o]() { return run_inspect(*o); }};
}

}  // namespace di::cli
