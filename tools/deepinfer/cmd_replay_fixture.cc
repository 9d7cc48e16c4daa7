// deepinfer replay-fixture: runs every case of a golden fixture directory through a backend and
// compares with the fixture's expected values (fixtures README §4 protocol, §6 rules).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "common/check.h"
#include "model/deepseek_v41/cpu_model.h"
#include "model/fixture_cases.h"
#include "model/fixture_replay.h"

namespace di::cli {
namespace {

struct ReplayCliOptions {
  std::string fixture_dir;
  std::string model_dir;  // default: the fixture directory
  std::string quirk = "intended";
  std::string backend = "cpu";
  std::string precision = "fp64";
  std::string dump;
  std::vector<std::string> cases;
};

std::string comparison_text(const CaseComparison& c) {
  std::string s = c.rows > 0 ? fmt::format("{}: rel {:.2e}", c.reference, c.max_rel)
                             : fmt::format("{}: rel -", c.reference);
  if (!c.strict && c.first_divergence) s += fmt::format(" ({} rows before)", c.rows);
  s += fmt::format(" top1 {}/{}", c.top1_agree, c.top1_total);
  if (c.ids_total > 0) s += fmt::format(" ids {}/{}", c.ids_agree, c.ids_total);
  if (c.draft_inputs_agree != c.draft_inputs_total)
    s += fmt::format(" dspark-inputs {}/{}", c.draft_inputs_agree, c.draft_inputs_total);
  if (c.draft_total > 0) {
    s += fmt::format(" drafts {}/{} conf {:.1e}", c.draft_agree, c.draft_total,
                     c.max_confidence_abs);
    if (c.draft_logit_rows > 0) s += fmt::format(" dlogits {:.1e}", c.max_draft_logits_rel);
  }
  if (c.first_divergence) {
    s += fmt::format(" | diverges at {}: {}", *c.first_divergence, c.divergence_detail);
  }
  if (c.first_draft_divergence) {
    s += fmt::format(" | drafts diverge at {}: {}", *c.first_draft_divergence,
                     c.draft_divergence_detail);
  }
  return s;
}

void print_case(const CaseReport& r) {
  fmt::print("{} {:<20} {:<28} {:>4} fwd {:7.2f} s", r.pass() ? "PASS" : "FAIL", r.name,
             fixture_case_kind_name(r.kind), r.forwards, r.seconds);
  for (const CaseComparison& c : r.comparisons)
    fmt::print("  [{}]", comparison_text(c));
  fmt::print("\n");
  for (const CaseComparison& c : r.comparisons) {
    for (const std::string& f : c.failures)
      fmt::print("    {}\n", f);
  }
}

int run_replay(const ReplayCliOptions& o) {
  namespace fs = std::filesystem;
  DI_CHECK(o.backend == "cpu", "backend '{}' is not available for replay-fixture", o.backend);
  // Validate the fixture index before the (slower) model load.
  const FixtureIndex idx = load_fixture_index(o.fixture_dir);
  for (const std::string& name : o.cases) {
    const bool known = std::any_of(idx.cases.begin(), idx.cases.end(),
                                   [&](const FixtureCase& c) { return c.name == name; });
    DI_CHECK(known, "{}: no case named '{}'", idx.json_path.string(), name);
  }
  ForwardOptions fo;
  fo.precision = o.precision == "fp64" ? Precision::kFp64 : Precision::kFp32;
  fo.quirk = o.quirk == "shipped" ? IndexKeyQuirk::kShipped : IndexKeyQuirk::kIntended;
  const fs::path model_dir = o.model_dir.empty() ? fs::path(o.fixture_dir) : fs::path(o.model_dir);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ForwardModel> model = load_cpu_forward_model(model_dir, fo);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  ReplayOptions ro;
  ro.precision = fo.precision;
  ro.quirk = fo.quirk;
  ro.only_cases = o.cases;
  ro.record_outputs = !o.dump.empty();
  ro.on_case = [](const CaseReport& r) {
    print_case(r);
    std::fflush(stdout);
  };
  fmt::print(
      "replay-fixture {} ({} cases) backend {} precision {} behaviour {}; model loaded in "
      "{:.2f} s\n",
      idx.fixture, idx.cases.size(), o.backend, o.precision, o.quirk, load_s);
  const ReplayReport report = replay_fixture(o.fixture_dir, *model, ro);
  int64_t passed = 0, forwards = 0, drafts = 0;
  double seconds = 0;
  for (const CaseReport& r : report.cases) {
    passed += r.pass();
    forwards += r.forwards;
    drafts += r.draft_steps;
    seconds += r.seconds;
  }
  if (!o.dump.empty()) {
    write_replay_dump(o.dump, report);
    fmt::print("wrote {} tensors to {}\n", report.outputs.size(), o.dump);
  }
  fmt::print("summary: {}/{} cases passed ({} {}), {} forwards, {} draft steps, {:.2f} s\n", passed,
             report.cases.size(), report.precision, report.behaviour, forwards, drafts, seconds);
  return report.pass() ? 0 : 1;
}

}  // namespace

Command add_replay_fixture(CLI::App& root) {
  auto o = std::make_shared<ReplayCliOptions>();
  CLI::App* app = root.add_subcommand(
      "replay-fixture",
      "Run every case of a golden fixture directory and compare with its expected values");
  app->add_option("FIXTURE_DIR", o->fixture_dir, "fixture directory (cases.json, ...)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("--model", o->model_dir, "checkpoint directory (default: FIXTURE_DIR)")
      ->check(CLI::ExistingDirectory);
  app->add_option("--quirk", o->quirk, "index-key behaviour: intended | shipped")
      ->check(CLI::IsMember({"intended", "shipped"}));
  app->add_option("--backend", o->backend, "backend: cpu")->check(CLI::IsMember({"cpu"}));
  app->add_option("--precision", o->precision,
                  "fp64: strict match of the fp64 values; fp32: first-divergence rule")
      ->check(CLI::IsMember({"fp64", "fp32"}));
  app->add_option("--dump", o->dump,
                  "write the engine's outputs to this safetensors file (fixture key names)");
  app->add_option("--case", o->cases, "run only this case (repeatable)");
  return {app, [o]() { return run_replay(*o); }};
}

}  // namespace di::cli
