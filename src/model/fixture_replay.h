#pragma once

// Replays the cases of a golden fixture directory through a ForwardModel and compares the
// engine's outputs with the expected tensors (fixtures README §4 protocol, §6 comparison
// rules). The run itself never reads expected values: teacher-forced steps feed step_ids,
// greedy generation feeds the engine's own argmax, DSpark is fed the engine's argmax.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/fixture_cases.h"
#include "model/forward_api.h"

namespace di {

struct CaseReport;
class TraceRecorder;

// The first-divergence rule (README §6.4): a row beyond divergence_rel (or a confidence beyond
// divergence_confidence_abs, or any id/argmax mismatch) is a divergence. Deviations above
// noise_rel mark where a rounding flip may have started (its onset); the divergence is legitimate
// when a near-tie is recorded at some forward from the onset (or from near_tie_lookback forwards
// earlier, whichever is first) to the divergence. The lookback exists because a flip can change
// cached state (KV, compressor carry) without visibly moving that forward's last-row logits: the
// fixture's own fp32 values split from fp64 at decode step 0 (and batch row 0 step 0) with the
// near-ties recorded in the prefill.
struct FirstDivergenceRule {
  int64_t near_tie_lookback = 1;
  double divergence_rel = 1e-4;
  double divergence_confidence_abs = 1e-4;
  double noise_rel = 1e-5;
  NearTieThresholds near_tie;
  // The bf16 rule (README §6.6). Two bf16 engines differ by one bf16 rounding (2^-9 relative) of
  // an activation wherever their float accumulations land on different sides of a rounding
  // boundary, which is common, so before a discrete flip rows agree only to a few 1e-3 of the
  // logit spread; a flip moves a row by O(1). Top-k ties are exact in bf16 scores (README §5.3).
  static FirstDivergenceRule bf16_defaults();
};

struct ReplayOptions {
  Precision precision = Precision::kFp64;          // which expected values (and which rule) apply
  IndexKeyQuirk quirk = IndexKeyQuirk::kIntended;  // which behaviour suffix applies
  std::vector<std::string> only_cases;             // run just these case names (empty: all)
  bool record_outputs = false;                     // keep the engine's tensors for a dump
  std::function<void(const CaseReport&)> on_case;  // called as each case completes

  // fp64 (strict, README §6.3): every logits row, draft-logits rows included, within this
  // relative error (max |Δ| / std(ref row)); DSpark confidences within the absolute error.
  double strict_rel = 1e-9;
  double strict_confidence_abs = 1e-9;
  // fp32 (README §6.4) and bf16 (README §6.6): the first-divergence rule, with tolerances sized
  // to each precision's noise (see FirstDivergenceRule).
  FirstDivergenceRule fp32;
  FirstDivergenceRule bf16 = FirstDivergenceRule::bf16_defaults();
};

// The engine against the expected values of one precision, for one case.
struct CaseComparison {
  std::string reference;  // "fp64", "fp32" or "bf16"
  bool strict = true;     // fp64 rule; false: first-divergence rule

  // Backbone logits rows compared tightly (strict: all; otherwise up to the first divergence).
  int64_t rows = 0;
  double max_rel = 0;
  std::string max_rel_at;
  // Argmax agreement over every row (after a divergence too: the loose comparison).
  int64_t top1_agree = 0;
  int64_t top1_total = 0;
  // Generated ids (greedy generation).
  int64_t ids_agree = 0;
  int64_t ids_total = 0;
  // DSpark input ids (the engine's argmax fed to the drafter).
  int64_t draft_inputs_agree = 0;
  int64_t draft_inputs_total = 0;
  // DSpark steps compared while the backbone matches: whole draft blocks equal (after the
  // drafter's first divergence too, loosely); the largest confidence difference and the largest
  // draft-logits row error (up to the drafter's first divergence).
  int64_t draft_agree = 0;
  int64_t draft_total = 0;
  double max_confidence_abs = 0;
  int64_t draft_logit_rows = 0;
  double max_draft_logits_rel = 0;

  // "row 0 step 5" where the backbone first diverged (strict: first failing row), and why.
  // Steps name backbone forwards: decode step k, or for greedy generation the forward that
  // produced ids[:, k] (its DSpark outputs sit at index k-1).
  std::optional<std::string> first_divergence;
  std::string divergence_detail;
  std::optional<std::string> first_draft_divergence;
  std::string draft_divergence_detail;

  std::vector<std::string> failures;  // empty = within tolerance
  bool pass() const { return failures.empty(); }
};

struct CaseReport {
  std::string name;
  FixtureCaseKind kind = FixtureCaseKind::kPrefill;
  int64_t forwards = 0;     // backbone forward calls
  int64_t draft_steps = 0;  // dspark_step calls
  double seconds = 0;
  // [0]: the chosen precision; for fp32 runs also [1]: fp64 (README §6.4: preferably fp64). A bf16
  // run is judged against bf16 alone (README §6.6).
  std::vector<CaseComparison> comparisons;
  bool pass() const;
};

struct ReplayReport {
  std::string fixture;
  std::string precision;  // "fp64" | "fp32" | "bf16"
  std::string behaviour;  // "intended" | "shipped"
  std::vector<CaseReport> cases;
  // With record_outputs: the engine's tensors under the fixture's keys for the chosen
  // precision and behaviour (F64 in fp64, F32 otherwise, I64 for ids).
  std::vector<FixtureTensor> outputs;
  bool pass() const;
};

// Runs every case (or opts.only_cases) of `fixture_dir` through `model`, which must have been
// built with the same precision and quirk. Throws di::Error for malformed or missing fixture
// data, an unknown case name, or model outputs of the wrong size.
ReplayReport replay_fixture(const std::filesystem::path& fixture_dir, ForwardModel& model,
                            const ReplayOptions& opts);

// Writes report.outputs as a safetensors file.
void write_replay_dump(const std::filesystem::path& path, const ReplayReport& report);

// The forwards of the fixture's layer trace (fixtures TRACE.md §1), run through `model` with
// `recorder` installed as its tracer and each forward recorded under its run name:
// `prefill_run` is a one-shot prefill of the prefill case's input ids; "decode.step-1" is the
// prefill of the decode case's prompt_ids, "decode.step<k>" feeds step_ids[:, k] (teacher
// forcing), and the DSpark drafter runs after the prefill (ring seeding) and after every step
// (fed the step's argmax), as in the replay. Batch row 0 only.
struct TraceRunOptions {
  std::string prefill_case = "prefill.L17";
  std::string prefill_run = "prefill_L17";
  std::string decode_case = "decode";
  int64_t decode_steps = 6;  // the trace holds steps 0..5
};
// Returns the run names in order. The tracer is uninstalled again on return.
std::vector<std::string> run_trace_forwards(const std::filesystem::path& fixture_dir,
                                            ForwardModel& model, TraceRecorder& recorder,
                                            const TraceRunOptions& opts = {});

const char* precision_label(Precision p);      // "fp64" | "fp32" | "bf16"
const char* behaviour_label(IndexKeyQuirk q);  // "intended" | "shipped"

// max |eng - ref| / std(ref) (population std; the max |Δ| itself when std is 0); +inf when
// eng holds a NaN or the sizes differ.
double row_rel(std::span<const double> eng, std::span<const double> ref);
// Index of the largest value, the lowest index on ties (temperature-0 sampling).
int64_t argmax_lowest(std::span<const double> row);

}  // namespace di
