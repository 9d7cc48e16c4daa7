// deepinfer replay-fixture: runs every case of a golden fixture directory through a backend and
// compares with the fixture's expected values (fixtures README §4 protocol, §6 rules). With
// --dump-layers / --compare-trace it also runs the forwards of the fixture's layer trace
// (TRACE.md) with every named intermediate recorded, writes them, and/or diffs them by name with
// trace.safetensors, reporting the first departure (the bisection tool).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "commands.h"
#include "common/check.h"
#include "model/deepseek_v41/cpu_model.h"
#if DI_HAVE_CUDA
#include "model/deepseek_v41/cuda_model.h"
#endif
#include "model/fixture_cases.h"
#include "model/fixture_replay.h"
#include "model/trace.h"

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
  std::string dump_layers;
  bool compare_trace = false;
  bool trace_only = false;
  bool dspark_cpu = false;  // --backend cuda: draft on the CPU reference (drafter kCpuReference)
  double trace_threshold = 1e-6;
};

// "prefill_L17.layer.3.attn.q" -> "layer.*.attn.q"; "decode.step0.final.x" -> "final.x".
std::string trace_item(const std::string& name, const std::vector<std::string>& runs) {
  std::string rest = name;
  for (const std::string& run : runs) {
    if (name.rfind(run + ".", 0) == 0) rest = name.substr(run.size() + 1);
  }
  for (const char* block : {"layer.", "dspark.layer."}) {
    const std::string b = block;
    if (rest.rfind(b, 0) != 0) continue;
    const size_t dot = rest.find('.', b.size());
    if (dot != std::string::npos) rest = b + "*" + rest.substr(dot);
  }
  return rest;
}

std::string diff_entry_text(const TraceDiffEntry& e) {
  if (!e.shape_ok) return fmt::format("{}: shape differs", e.name);
  if (e.is_ids) return fmt::format("{}: {} ids differ", e.name, e.mismatches);
  return fmt::format("{}: rel {:.3g} (unrounded {:.3g})", e.name, e.rel, e.raw_rel);
}

// Runs the traced forwards; dumps and/or compares them. Returns false when the trace departs.
bool run_trace(const ReplayCliOptions& o, ForwardModel& model, Precision precision) {
  namespace fs = std::filesystem;
  TraceRecorder rec;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> runs = run_trace_forwards(o.fixture_dir, model, rec);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("trace: {} runs ({}), {} tensors recorded in {:.2f} s\n", runs.size(),
             fmt::join(runs, " "), rec.tensors().size(), secs);
  if (!o.dump_layers.empty()) {
    rec.write_safetensors(o.dump_layers, precision == Precision::kFp64 ? DType::kF64 : DType::kF32);
    fmt::print("wrote {} tensors to {}\n", rec.tensors().size(), o.dump_layers);
  }
  if (!o.compare_trace) return true;
  const fs::path ref = fs::path(o.fixture_dir) / "trace.safetensors";
  DI_CHECK(fs::exists(ref), "{}: no layer trace to compare with", ref.string());
  std::vector<std::string> prefixes;
  for (const std::string& r : runs)
    prefixes.push_back(r + ".");
  const TraceDiff d = compare_trace(rec, ref, o.trace_threshold, prefixes);
  int64_t ids = 0;
  for (const TraceDiffEntry& e : d.entries)
    ids += e.is_ids;
  fmt::print(
      "trace-diff vs {}: {} names compared ({} floats, {} ids); max rel {:.3g} at {} (engine "
      "rounded to the trace's storage dtype), {:.3g} at {} unrounded\n",
      ref.string(), d.entries.size(), static_cast<int64_t>(d.entries.size()) - ids, ids, d.max_rel,
      d.max_rel_at.empty() ? "-" : d.max_rel_at, d.max_raw_rel,
      d.max_raw_rel_at.empty() ? "-" : d.max_raw_rel_at);
  // What one side has and the other lacks, by item name (run and layer stripped).
  auto summarize = [&](const std::vector<std::string>& names, const char* what) {
    if (names.empty()) return;
    std::map<std::string, int64_t> items;
    for (const std::string& n : names)
      ++items[trace_item(n, runs)];
    std::vector<std::string> parts;
    for (const auto& [item, count] : items)
      parts.push_back(fmt::format("{} x{}", item, count));
    fmt::print("  {} ({} tensors): {}\n", what, names.size(), fmt::join(parts, ", "));
  };
  summarize(d.reference_only, "only in the reference");
  summarize(d.engine_only, "only in the engine");
  if (!d.first_failure) {
    fmt::print("trace-diff: every shared name within rel {:.0e} (ids exact)\n", o.trace_threshold);
    return true;
  }
  fmt::print("trace-diff: FIRST DEPARTURE {} (threshold {:.0e}); {} names depart\n",
             diff_entry_text(d.entries[*d.first_failure]), o.trace_threshold, d.failures);
  int64_t shown = 0;
  for (const TraceDiffEntry& e : d.entries) {
    if (e.pass) continue;
    if (++shown > 20) {
      fmt::print("    ...\n");
      break;
    }
    fmt::print("    {}\n", diff_entry_text(e));
  }
  return false;
}

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
#if DI_HAVE_CUDA
  DI_CHECK(o.backend == "cpu" || o.backend == "cuda",
           "backend '{}' is not available for replay-fixture", o.backend);
#else
  DI_CHECK(o.backend == "cpu",
           "backend '{}' is not available for replay-fixture (this build has no CUDA backend: "
           "configure with -DDI_ENABLE_CUDA=ON)",
           o.backend);
#endif
  // Validate the fixture index before the (slower) model load.
  const FixtureIndex idx = load_fixture_index(o.fixture_dir);
  for (const std::string& name : o.cases) {
    const bool known = std::any_of(idx.cases.begin(), idx.cases.end(),
                                   [&](const FixtureCase& c) { return c.name == name; });
    DI_CHECK(known, "{}: no case named '{}'", idx.json_path.string(), name);
  }
  ForwardOptions fo;
  fo.precision = o.precision == "fp64"   ? Precision::kFp64
                 : o.precision == "bf16" ? Precision::kBf16
                                         : Precision::kFp32;
  fo.quirk = o.quirk == "shipped" ? IndexKeyQuirk::kShipped : IndexKeyQuirk::kIntended;
  const fs::path model_dir = o.model_dir.empty() ? fs::path(o.fixture_dir) : fs::path(o.model_dir);
  const auto t0 = std::chrono::steady_clock::now();
  DI_CHECK(!o.dspark_cpu || o.backend == "cuda", "--dspark-cpu needs --backend cuda");
#if DI_HAVE_CUDA
  CudaForwardOptions co;
  co.drafter = o.dspark_cpu ? DsparkDrafter::kCpuReference : DsparkDrafter::kGpu;
  std::unique_ptr<ForwardModel> model = o.backend == "cuda"
                                            ? load_cuda_forward_model(model_dir, fo, co)
                                            : load_cpu_forward_model(model_dir, fo);
#else
  std::unique_ptr<ForwardModel> model = load_cpu_forward_model(model_dir, fo);
#endif
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  bool trace_ok = true;
  if (!o.dump_layers.empty() || o.compare_trace) trace_ok = run_trace(o, *model, fo.precision);
  if (o.trace_only) return trace_ok ? 0 : 1;

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
  return report.pass() && trace_ok ? 0 : 1;
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
  app->add_option("--backend", o->backend, "backend: cpu or cuda (CUDA builds)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app->add_option("--precision", o->precision,
                  "fp64: strict match of the fp64 values; fp32: first-divergence rule against "
                  "fp32 and fp64; bf16: first-divergence rule against bf16 (CPU backend)")
      ->check(CLI::IsMember({"fp64", "fp32", "bf16"}));
  app->add_option("--dump", o->dump,
                  "write the engine's outputs to this safetensors file (fixture key names)");
  app->add_option("--case", o->cases, "run only this case (repeatable)");
  app->add_option("--dump-layers", o->dump_layers,
                  "run the layer-trace forwards (TRACE.md) and write every named intermediate "
                  "to this safetensors file");
  app->add_flag("--compare-trace", o->compare_trace,
                "run the layer-trace forwards and diff them by name with FIXTURE_DIR/"
                "trace.safetensors; prints the first name beyond --trace-threshold");
  app->add_flag("--dspark-cpu", o->dspark_cpu,
                "--backend cuda: the CPU reference drafts inside the CUDA model (default: the "
                "DSpark drafter runs on the GPU)");
  app->add_option("--trace-threshold", o->trace_threshold,
                  "largest max|diff|/std(ref) for a float intermediate (default 1e-6)");
  app->add_flag("--trace-only", o->trace_only,
                "with --dump-layers / --compare-trace: skip the golden cases");
  return {app, [o]() { return run_replay(*o); }};
}

}  // namespace di::cli
