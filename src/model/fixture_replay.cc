#include "model/fixture_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "common/check.h"
#include "common/error.h"
#include "common/logging.h"
#include "loader/safetensors_writer.h"
#include "model/fixture_replay_detail.h"
#include "model/trace.h"

namespace di {
namespace {

using fixture_detail::ids_at;
using fixture_detail::is_dspark_field;
using fixture_detail::is_id_field;
using fixture_detail::prefill_pairs;
using fixture_detail::RoleTensors;
using fixture_detail::values_at;

// ---------------------------------------------------------------------------------------------
// Comparing engine tensors with the expected tensors of one precision.

struct DraftEvent {
  std::optional<std::pair<int64_t, int64_t>> input_id;  // engine, expected
  std::span<const int64_t> eng_ids, ref_ids;
  std::span<const double> eng_conf, ref_conf;
  std::vector<std::pair<std::span<const double>, std::span<const double>>> logits;
};

struct Event {
  std::string where;
  MarginForward forward;
  std::span<const double> eng, ref;               // backbone logits rows
  std::optional<std::pair<int64_t, int64_t>> id;  // generated id: engine, expected
  std::optional<DraftEvent> draft;
};

// One sequence's forwards in order; first divergences are tracked per sequence.
struct Sequence {
  std::vector<std::string> labels;  // margin-table labels, most specific first
  std::vector<Event> events;
};

std::string row_prefix(int64_t batch, int64_t b) {
  return batch > 1 ? fmt::format("row {} ", b) : std::string();
}

const FixtureTensor& need(const RoleTensors& t, const std::string& role, const std::string& what,
                          const std::string& case_name) {
  auto it = t.find(role);
  if (it == t.end()) throw Error(fmt::format("case '{}': {} has no '{}'", case_name, what, role));
  return it->second;
}

std::vector<Sequence> build_sequences(const FixtureCase& c, const std::vector<ExpectedRole>& roles,
                                      const RoleTensors& eng, const RoleTensors& ref,
                                      const std::string& behaviour) {
  std::vector<Sequence> seqs;
  auto get = [&](const std::string& field, const RoleTensors& t,
                 const char* what) -> const FixtureTensor* {
    for (const ExpectedRole& r : roles) {
      if (r.field == field) return &need(t, r.role, what, c.name);
    }
    return nullptr;
  };
  if (c.kind == FixtureCaseKind::kPrefill) {
    for (const auto& [input_role, role] : prefill_pairs(c, roles)) {
      const FixtureTensor& e = need(eng, role, "the engine output", c.name);
      const FixtureTensor& r = need(ref, role, "the reference", c.name);
      const int64_t batch = e.shape[0];
      for (int64_t b = 0; b < batch; ++b) {
        Sequence s;
        s.labels = {c.name + "." + input_role, c.name + ":" + behaviour, c.name};
        const std::string where = c.inputs.size() > 1
                                      ? fmt::format("{}{}", row_prefix(batch, b), input_role)
                                      : fmt::format("{}prefill", row_prefix(batch, b));
        s.events.push_back({where, {true, 0}, values_at(e, {b}), values_at(r, {b}), {}, {}});
        seqs.push_back(std::move(s));
      }
    }
    return seqs;
  }
  const bool greedy = c.kind == FixtureCaseKind::kGreedyGeneration;
  const FixtureTensor* e_logits = get("logits", eng, "the engine output");
  const FixtureTensor* r_logits = get("logits", ref, "the reference");
  const FixtureTensor* e_pre = get("prefill_logits", eng, "the engine output");
  const FixtureTensor* r_pre = get("prefill_logits", ref, "the reference");
  const FixtureTensor* e_ids = get("ids", eng, "the engine output");
  const FixtureTensor* r_ids = get("ids", ref, "the reference");
  const FixtureTensor* e_din = get("dspark_input_ids", eng, "the engine output");
  const FixtureTensor* r_din = get("dspark_input_ids", ref, "the reference");
  const FixtureTensor* e_dids = get("dspark_draft_ids", eng, "the engine output");
  const FixtureTensor* r_dids = get("dspark_draft_ids", ref, "the reference");
  const FixtureTensor* e_conf = get("dspark_confidence", eng, "the engine output");
  const FixtureTensor* r_conf = get("dspark_confidence", ref, "the reference");
  const FixtureTensor* e_dl = get("dspark_draft_logits", eng, "the engine output");
  // Draft-logits rows are attached by attach_draft_logits (they exist at listed steps only).
  const bool dspark = e_din || e_dids || e_conf || e_dl;
  const int64_t batch = e_logits->shape[0];
  const int64_t n = e_logits->shape[1];
  for (int64_t b = 0; b < batch; ++b) {
    Sequence s;
    s.labels = {c.name + ":" + behaviour, c.name};
    if (e_pre) {
      s.events.push_back({row_prefix(batch, b) + "prefill",
                          {true, 0},
                          values_at(*e_pre, {b}),
                          values_at(*r_pre, {b}),
                          {},
                          {}});
    }
    for (int64_t k = 0; k < n; ++k) {
      Event ev;
      ev.where = greedy && k == 0 ? row_prefix(batch, b) + "prefill"
                                  : fmt::format("{}step {}", row_prefix(batch, b), k);
      ev.forward = greedy && k == 0 ? MarginForward{true, 0} : MarginForward{false, k};
      ev.eng = values_at(*e_logits, {b, k});
      ev.ref = values_at(*r_logits, {b, k});
      if (e_ids) ev.id = std::pair{ids_at(*e_ids, {b, k})[0], ids_at(*r_ids, {b, k})[0]};
      const int64_t j = greedy ? k - 1 : k;  // index on the DSpark axis
      if (dspark && j >= 0) {
        DraftEvent d;
        if (e_din) d.input_id = std::pair{ids_at(*e_din, {b, j})[0], ids_at(*r_din, {b, j})[0]};
        if (e_dids) {
          d.eng_ids = ids_at(*e_dids, {b, j});
          d.ref_ids = ids_at(*r_dids, {b, j});
        }
        if (e_conf) {
          d.eng_conf = values_at(*e_conf, {b, j});
          d.ref_conf = values_at(*r_conf, {b, j});
        }
        ev.draft = std::move(d);
      }
      s.events.push_back(std::move(ev));
    }
    seqs.push_back(std::move(s));
  }
  return seqs;
}

// Attaches draft-logits rows to the events of their DSpark steps.
void attach_draft_logits(std::vector<Sequence>& seqs, const FixtureCase& c,
                         const std::vector<ExpectedRole>& roles, const RoleTensors& eng,
                         const RoleTensors& ref, const FixtureTensors& tensors) {
  const ExpectedRole* role = nullptr;
  for (const ExpectedRole& r : roles) {
    if (r.field == "dspark_draft_logits") role = &r;
  }
  if (!role || !c.dspark_logit_steps_key) return;
  const FixtureTensor& e = need(eng, role->role, "the engine output", c.name);
  const FixtureTensor& r = need(ref, role->role, "the reference", c.name);
  const FixtureTensor steps = tensors.load_ids(*c.dspark_logit_steps_key, 1);
  const bool greedy = c.kind == FixtureCaseKind::kGreedyGeneration;
  const int64_t batch = e.shape[0];
  const int64_t block = e.shape[2];
  for (int64_t b = 0; b < batch && b < static_cast<int64_t>(seqs.size()); ++b) {
    Sequence& s = seqs[static_cast<size_t>(b)];
    for (int64_t slot = 0; slot < steps.shape[0]; ++slot) {
      const int64_t j = steps.ids[static_cast<size_t>(slot)];
      const int64_t k = greedy ? j + 1 : j;  // logits index of the forward before this step
      for (Event& ev : s.events) {
        if (ev.forward.prefill || ev.forward.step != k || !ev.draft) continue;
        for (int64_t i = 0; i < block; ++i)
          ev.draft->logits.emplace_back(values_at(e, {b, slot, i}), values_at(r, {b, slot, i}));
      }
    }
  }
}

class Comparer {
 public:
  Comparer(CaseComparison& out, const FixtureMargins& margins, const ReplayOptions& o)
      : out_(out), margins_(margins), o_(o), rule_(out.reference == "bf16" ? o.bf16 : o.fp32) {
    topk_precisions_ = {out.reference};
    if (out.reference != "fp64") topk_precisions_.push_back("fp64");
  }

  void compare(const Sequence& s) {
    std::optional<size_t> onset, draft_onset;
    bool diverged = false, draft_diverged = false;
    const double tol = out_.strict ? o_.strict_rel : rule_.divergence_rel;
    const double conf_tol =
        out_.strict ? o_.strict_confidence_abs : rule_.divergence_confidence_abs;
    for (size_t i = 0; i < s.events.size(); ++i) {
      const Event& ev = s.events[i];
      const double rel = row_rel(ev.eng, ev.ref);
      const int64_t ae = argmax_lowest(ev.eng), ar = argmax_lowest(ev.ref);
      ++out_.top1_total;
      out_.top1_agree += ae == ar;
      bool id_bad = false;
      if (ev.id) {
        ++out_.ids_total;
        out_.ids_agree += ev.id->first == ev.id->second;
        id_bad = ev.id->first != ev.id->second;
      }
      if (!diverged) {
        const bool bad = !(rel <= tol) || ae != ar || id_bad;
        std::string what;
        if (bad) {
          what = !(rel <= tol) ? fmt::format("rel {:.3g} > {:.0e}", rel, tol)
                               : fmt::format("argmax {} vs {}", ae, ar);
          if (id_bad) what += fmt::format(", id {} vs {}", ev.id->first, ev.id->second);
        }
        if (out_.strict) {
          ++out_.rows;
          note_max(rel, ev.where);
          if (bad) {
            if (!out_.first_divergence) {
              out_.first_divergence = ev.where;
              out_.divergence_detail = what;
            }
            add_failure(fmt::format("{}: {}", ev.where, what));
          }
        } else {
          if (!onset && !(rel <= rule_.noise_rel)) onset = i;
          if (bad) {
            diverged = true;
            out_.first_divergence = ev.where;
            bool legit = false;
            const std::string why = judge(s, window_start(onset, i), i, false, &legit);
            out_.divergence_detail = fmt::format("{}; {}", what, why);
            if (!legit) add_failure(fmt::format("{}: {}; {}", ev.where, what, why));
          } else {
            ++out_.rows;
            note_max(rel, ev.where);
          }
        }
      }
      if (ev.draft) compare_draft(s, i, diverged, conf_tol, tol, draft_onset, draft_diverged);
    }
  }

  void finish() {
    if (dropped_ > 0) out_.failures.push_back(fmt::format("... and {} more", dropped_));
  }

 private:
  void note_max(double rel, const std::string& where) {
    if (!(rel <= out_.max_rel)) {
      out_.max_rel = rel;
      out_.max_rel_at = where;
    }
  }

  void add_failure(std::string msg) {
    if (out_.failures.size() < kMaxFailures) {
      out_.failures.push_back(fmt::format("vs {}: {}", out_.reference, msg));
    } else {
      ++dropped_;
    }
  }

  void compare_draft(const Sequence& s, size_t i, bool backbone_diverged, double conf_tol,
                     double tol, std::optional<size_t>& onset, bool& diverged) {
    const Event& ev = s.events[i];
    const DraftEvent& d = *ev.draft;
    bool input_bad = false;
    if (d.input_id) {
      ++out_.draft_inputs_total;
      out_.draft_inputs_agree += d.input_id->first == d.input_id->second;
      input_bad = d.input_id->first != d.input_id->second;
    }
    // README §6.5: drafts are comparable only while the backbone still matches.
    if (!out_.strict && (backbone_diverged || input_bad)) return;
    ++out_.draft_total;
    const bool ids_equal =
        std::equal(d.eng_ids.begin(), d.eng_ids.end(), d.ref_ids.begin(), d.ref_ids.end());
    out_.draft_agree += ids_equal;
    if (!out_.strict && diverged) return;  // after the drafter's first divergence: loose
    double conf = 0;
    for (size_t j = 0; j < d.eng_conf.size() && j < d.ref_conf.size(); ++j) {
      const double diff = std::fabs(d.eng_conf[j] - d.ref_conf[j]);
      conf = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(conf, diff);
    }
    double dl = 0;
    for (const auto& [e, r] : d.logits) {
      const double rel = row_rel(e, r);
      dl = std::isnan(rel) || !(rel <= dl) ? rel : dl;
    }
    std::vector<std::string> what;
    if (input_bad)
      what.push_back(fmt::format("input id {} vs {}", d.input_id->first, d.input_id->second));
    if (!ids_equal)
      what.push_back(fmt::format("draft ids [{}] vs [{}]", fmt::join(d.eng_ids, " "),
                                 fmt::join(d.ref_ids, " ")));
    if (!(conf <= conf_tol)) what.push_back(fmt::format("confidence |Δ| {:.3g}", conf));
    if (!(dl <= tol)) what.push_back(fmt::format("draft logits rel {:.3g}", dl));
    const bool bad = !what.empty();
    const std::string text = fmt::format("{}", fmt::join(what, ", "));
    auto account = [&] {
      out_.max_confidence_abs = std::max(out_.max_confidence_abs, conf);
      out_.draft_logit_rows += static_cast<int64_t>(d.logits.size());
      if (!(dl <= out_.max_draft_logits_rel)) out_.max_draft_logits_rel = dl;
    };
    if (out_.strict) {
      account();
      if (bad) {
        if (!out_.first_draft_divergence) {
          out_.first_draft_divergence = ev.where;
          out_.draft_divergence_detail = text;
        }
        add_failure(fmt::format("{} DSpark: {}", ev.where, text));
      }
      return;
    }
    if (!onset && (!(conf <= rule_.noise_rel) || !(dl <= rule_.noise_rel))) onset = i;
    if (!bad) {
      account();
      return;
    }
    diverged = true;
    out_.first_draft_divergence = ev.where;
    bool legit = false;
    const std::string why = judge(s, window_start(onset, i), i, true, &legit);
    out_.draft_divergence_detail = fmt::format("{}; {}", text, why);
    if (!legit) add_failure(fmt::format("{} DSpark: {}; {}", ev.where, text, why));
  }

  size_t window_start(std::optional<size_t> onset, size_t i) const {
    const auto back = static_cast<size_t>(std::max<int64_t>(rule_.near_tie_lookback, 0));
    const size_t lookback = i >= back ? i - back : 0;
    return onset ? std::min(*onset, lookback) : lookback;
  }

  // README §6.4: a divergence is legitimate when a near-tie is recorded at a forward between
  // the start of its window (see ReplayOptions::near_tie_lookback) and the divergence itself.
  std::string judge(const Sequence& s, size_t from, size_t to, bool dspark, bool* legit) const {
    bool any_label = false;
    for (size_t i = to + 1; i-- > from;) {  // the divergent forward first, then earlier ones
      bool found = false;
      const auto ties = find_near_ties(margins_, s.labels, topk_precisions_, s.events[i].forward,
                                       dspark, rule_.near_tie, &found);
      any_label = any_label || found;
      if (!ties.empty()) {
        *legit = true;
        return fmt::format("near-tie: {}{}", ties.front(),
                           ties.size() > 1 ? fmt::format(" (+{} more)", ties.size() - 1) : "");
      }
    }
    *legit = false;
    if (!any_label) return fmt::format("no margin entry for {}", fmt::join(s.labels, " / "));
    return from == to ? "no near-tie recorded there"
                      : fmt::format("no near-tie recorded from {} to {}", s.events[from].where,
                                    s.events[to].where);
  }

  static constexpr size_t kMaxFailures = 8;
  CaseComparison& out_;
  const FixtureMargins& margins_;
  const ReplayOptions& o_;
  const FirstDivergenceRule& rule_;
  std::vector<std::string> topk_precisions_;
  int64_t dropped_ = 0;
};

RoleTensors load_reference(const FixtureCase& c, const std::vector<ExpectedRole>& roles,
                           const FixtureTensors& tensors) {
  RoleTensors out;
  for (const ExpectedRole& r : roles) {
    FixtureTensor t = tensors.load(r.key, &c.shape_of(r.key));
    if (t.is_ids() != is_id_field(r.field))
      throw Error(fmt::format("{}: tensor '{}' has dtype {}, unexpected for field '{}'",
                              tensors.path(), r.key, dtype_name(t.dtype), r.field));
    out[r.role] = std::move(t);
  }
  return out;
}

CaseComparison compare_case(const FixtureIndex& idx, const FixtureCase& c,
                            const FixtureTensors& tensors, const RoleTensors& eng,
                            const std::vector<ExpectedRole>& engine_roles,
                            const std::string& reference, const std::string& behaviour, bool strict,
                            const ReplayOptions& o) {
  CaseComparison cmp;
  cmp.reference = reference;
  cmp.strict = strict;
  const std::vector<ExpectedRole> ref_roles = c.roles_for(reference, behaviour);
  // Same role names in every precision; only the keys differ.
  std::set<std::string> a, b;
  for (const ExpectedRole& r : engine_roles)
    a.insert(r.role);
  for (const ExpectedRole& r : ref_roles)
    b.insert(r.role);
  if (a != b)
    throw Error(fmt::format("cases.json: case '{}': the {} roles differ from the other precision",
                            c.name, reference));
  const RoleTensors ref = load_reference(c, ref_roles, tensors);
  for (const auto& [role, t] : ref) {
    if (t.shape != need(eng, role, "the engine output", c.name).shape)
      throw Error(fmt::format("cases.json: case '{}': '{}' and the engine output differ in shape",
                              c.name, t.key));
  }
  std::vector<Sequence> seqs = build_sequences(c, ref_roles, eng, ref, behaviour);
  attach_draft_logits(seqs, c, ref_roles, eng, ref, tensors);
  Comparer comparer(cmp, idx.margins, o);
  for (const Sequence& s : seqs)
    comparer.compare(s);
  comparer.finish();
  return cmp;
}

void append_outputs(const RoleTensors& eng, Precision p, std::vector<FixtureTensor>& outputs) {
  for (const auto& [role, t] : eng) {
    FixtureTensor copy = t;
    if (!copy.is_ids())
      copy.dtype = p == Precision::kFp64 ? DType::kF64 : DType::kF32;  // bf16: F32
    outputs.push_back(std::move(copy));
  }
}

}  // namespace

const char* precision_label(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return "fp64";
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

FirstDivergenceRule FirstDivergenceRule::bf16_defaults() {
  FirstDivergenceRule r;
  r.divergence_rel = 3e-2;
  r.divergence_confidence_abs = 3e-2;
  r.noise_rel = 1e-3;
  r.near_tie.topk = 1e-2;
  r.near_tie.quant = 1e-6;
  return r;
}

const char* behaviour_label(IndexKeyQuirk q) {
  return q == IndexKeyQuirk::kShipped ? "shipped" : "intended";
}

double row_rel(std::span<const double> eng, std::span<const double> ref) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (eng.size() != ref.size() || ref.empty()) return kInf;
  double mean = 0;
  for (double v : ref)
    mean += v;
  mean /= static_cast<double>(ref.size());
  double var = 0;
  for (double v : ref)
    var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(ref.size()));
  double max_abs = 0;
  for (size_t i = 0; i < eng.size(); ++i) {
    const double d = std::fabs(eng[i] - ref[i]);
    if (std::isnan(d)) return kInf;
    max_abs = std::max(max_abs, d);
  }
  return sd > 0 ? max_abs / sd : max_abs;
}

int64_t argmax_lowest(std::span<const double> row) {
  int64_t best = 0;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] > row[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return best;
}

bool CaseReport::pass() const {
  for (const CaseComparison& c : comparisons) {
    if (!c.pass()) return false;
  }
  return true;
}

bool ReplayReport::pass() const {
  for (const CaseReport& c : cases) {
    if (!c.pass()) return false;
  }
  return true;
}

ReplayReport replay_fixture(const std::filesystem::path& fixture_dir, ForwardModel& model,
                            const ReplayOptions& opts) {
  const FixtureIndex idx = load_fixture_index(fixture_dir);
  const FixtureTensors tensors(fixture_dir / "cases.safetensors");
  ReplayReport report;
  report.fixture = idx.fixture;
  report.precision = precision_label(opts.precision);
  report.behaviour = behaviour_label(opts.quirk);
  for (const std::string& name : opts.only_cases) {
    const bool known = std::any_of(idx.cases.begin(), idx.cases.end(),
                                   [&](const FixtureCase& c) { return c.name == name; });
    if (!known) throw Error(fmt::format("{}: no case named '{}'", idx.json_path.string(), name));
  }
  const bool strict = opts.precision == Precision::kFp64;
  for (const FixtureCase& c : idx.cases) {
    if (!opts.only_cases.empty() && std::find(opts.only_cases.begin(), opts.only_cases.end(),
                                              c.name) == opts.only_cases.end()) {
      continue;
    }
    CaseReport cr;
    cr.name = c.name;
    cr.kind = c.kind;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<ExpectedRole> roles = c.roles_for(report.precision, report.behaviour);
    RoleTensors eng;
    try {
      eng = fixture_detail::run_case(model, c, tensors, report.precision, report.behaviour, cr);
    } catch (const fixture_detail::BackendError& e) {
      // A backend error fails this case (named, with the message); the other cases still run.
      CaseComparison failed;
      failed.reference = report.precision;
      failed.strict = strict;
      failed.failures.push_back(fmt::format("the backend failed: {}", e.what()));
      cr.comparisons.push_back(std::move(failed));
      cr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (opts.on_case) opts.on_case(cr);
      report.cases.push_back(std::move(cr));
      continue;
    }
    cr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cr.comparisons.push_back(compare_case(idx, c, tensors, eng, roles, report.precision,
                                          report.behaviour, strict, opts));
    if (opts.precision == Precision::kFp32 && c.expected.count("fp64")) {
      cr.comparisons.push_back(
          compare_case(idx, c, tensors, eng, roles, "fp64", report.behaviour, false, opts));
    }
    DI_LOG_DEBUG("replay {}: {} forwards, {} draft steps, {:.2f} s", c.name, cr.forwards,
                 cr.draft_steps, cr.seconds);
    if (opts.record_outputs) append_outputs(eng, opts.precision, report.outputs);
    if (opts.on_case) opts.on_case(cr);
    report.cases.push_back(std::move(cr));
  }
  return report;
}

void write_replay_dump(const std::filesystem::path& path, const ReplayReport& report) {
  std::vector<TensorSpec> specs;
  for (const FixtureTensor& t : report.outputs)
    specs.push_back({t.key, t.dtype, Shape(t.shape)});
  SafetensorsWriter w(path.string(), specs);
  for (const FixtureTensor& t : report.outputs) {
    switch (t.dtype) {
      case DType::kI64:
        w.write(std::as_bytes(std::span<const int64_t>(t.ids)));
        break;
      case DType::kF64:
        w.write(std::as_bytes(std::span<const double>(t.values)));
        break;
      default: {
        std::vector<float> f(t.values.begin(), t.values.end());
        w.write(std::as_bytes(std::span<const float>(f)));
        break;
      }
    }
  }
  w.finish();
}

}  // namespace di
