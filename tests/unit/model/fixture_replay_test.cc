// Tests of the fixture replay harness itself, with a fake ForwardModel that answers from the
// fixture's own expected tensors, looked up by the exact call history (chunking included), so
// a harness that feeds the wrong tokens, splits chunks differently or passes the wrong DSpark
// inputs gets no answer.

#include "model/fixture_replay.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

namespace fs = std::filesystem;

fs::path fixture_dir() {
  return fs::path(DI_SHARED_DIR) / "fixtures" / "v41-tiny-a";
}

#define SKIP_WITHOUT_FIXTURE()                                                       \
  do {                                                                               \
    if (!fs::exists(fixture_dir() / "cases.json")) GTEST_SKIP() << "fixture absent"; \
  } while (0)

std::string chunk_key(std::span<const int64_t> ids) {
  return fmt::format("|{}", fmt::join(ids, ","));
}

// The sub-tensor of `t` at leading indices `lead`, copied.
template <typename T>
std::vector<T> sub(const std::vector<T>& data, const std::vector<int64_t>& shape,
                   std::vector<int64_t> lead) {
  int64_t off = 0, len = 1;
  for (size_t d = 0; d < lead.size(); ++d)
    off = off * shape[d] + lead[d];
  for (size_t d = lead.size(); d < shape.size(); ++d)
    len *= shape[d];
  return {data.begin() + off * len, data.begin() + (off + 1) * len};
}

// The expected answers of every call, keyed by history: "|p0,p1,...|s0|s1" for the backbone
// (one "|" per forward chunk), history + "#" + input id for a DSpark step.
struct Script {
  int64_t vocab = 0;
  int64_t block = 0;
  std::map<std::string, std::vector<double>> logits;
  std::map<std::string, DraftResult> drafts;
  // "<case>/<row>/<logits index>" (-1: a decode case's prefill) -> history, for perturbations.
  std::map<std::string, std::string> where;
};

std::string where_key(const std::string& c, int64_t b, int64_t k) {
  return c + "/" + std::to_string(b) + "/" + std::to_string(k);
}

// The README §4 protocol, written out independently of the harness.
Script build_script(const std::string& prec, const std::string& behaviour) {
  const FixtureIndex idx = load_fixture_index(fixture_dir());
  const FixtureTensors t(fixture_dir() / "cases.safetensors");
  Script s;
  for (const FixtureCase& c : idx.cases) {
    auto field = [&](const std::string& f) -> std::optional<FixtureTensor> {
      if (const ExpectedRole* r = c.find_role(prec, behaviour, f)) return t.load(r->key);
      return std::nullopt;
    };
    if (c.kind == FixtureCaseKind::kPrefill) {
      for (const auto& [role, key] : c.inputs) {
        const FixtureTensor ids = t.load(key);
        const ExpectedRole* r = c.find_role(prec, behaviour, role);
        if (!r) r = c.find_role(prec, behaviour, "logits");
        const FixtureTensor lg = t.load(r->key);
        s.vocab = lg.shape.back();
        for (int64_t b = 0; b < ids.shape[0]; ++b) {
          const std::string h = chunk_key(sub(ids.ids, ids.shape, {b}));
          s.logits[h] = sub(lg.values, lg.shape, {b});
          s.where[where_key(c.name + "." + role, b, 0)] = h;
        }
      }
      continue;
    }
    const bool greedy = c.kind == FixtureCaseKind::kGreedyGeneration;
    const FixtureTensor prompt = t.load(c.inputs.at("prompt_ids"));
    const auto lg = field("logits");
    const auto pre = field("prefill_logits");
    const auto gen = field("ids");
    const auto din = field("dspark_input_ids");
    const auto dids = field("dspark_draft_ids");
    const auto conf = field("dspark_confidence");
    const auto dl = field("dspark_draft_logits");
    std::map<int64_t, int64_t> slot;
    if (dl) {
      const FixtureTensor st = t.load(*c.dspark_logit_steps_key);
      for (size_t j = 0; j < st.ids.size(); ++j)
        slot[st.ids[j]] = static_cast<int64_t>(j);
    }
    std::optional<FixtureTensor> steps;
    if (!greedy) steps = t.load(c.inputs.at("step_ids"));
    const int64_t n = lg->shape[1];
    for (int64_t b = 0; b < prompt.shape[0]; ++b) {
      std::string h = chunk_key(sub(prompt.ids, prompt.shape, {b}));
      if (greedy) {
        s.logits[h] = sub(lg->values, lg->shape, {b, 0});
        s.where[where_key(c.name, b, 0)] = h;
      } else if (pre) {
        s.logits[h] = sub(pre->values, pre->shape, {b});
        s.where[where_key(c.name, b, -1)] = h;
      }
      for (int64_t k = greedy ? 1 : 0; k < n; ++k) {
        const int64_t fed = greedy ? gen->ids[static_cast<size_t>(b * n + k - 1)]
                                   : steps->ids[static_cast<size_t>(b * n + k)];
        h += chunk_key(std::vector<int64_t>{fed});
        s.logits[h] = sub(lg->values, lg->shape, {b, k});
        s.where[where_key(c.name, b, k)] = h;
        if (!dids) continue;
        const int64_t j = greedy ? k - 1 : k;
        DraftResult d;
        d.draft_ids = sub(dids->ids, dids->shape, {b, j});
        d.confidence = sub(conf->values, conf->shape, {b, j});
        s.block = static_cast<int64_t>(d.draft_ids.size());
        for (int64_t i = 0; i < s.block; ++i) {
          d.logits.push_back(slot.count(j) ? sub(dl->values, dl->shape, {b, slot[j], i})
                                           : std::vector<double>(static_cast<size_t>(s.vocab)));
        }
        const int64_t input = sub(din->ids, din->shape, {b, j})[0];
        s.drafts[h + "#" + std::to_string(input)] = std::move(d);
      }
    }
  }
  return s;
}

class FakeState : public SequenceState {
 public:
  int64_t num_tokens() const override { return tokens; }
  std::string history;
  int64_t tokens = 0;
};

class FakeModel : public ForwardModel {
 public:
  explicit FakeModel(const Script& s) : s_(s) {}
  std::unique_ptr<SequenceState> new_sequence() const override {
    return std::make_unique<FakeState>();
  }
  ForwardResult forward(std::span<const SequenceChunk> chunks) override {
    if (fail_batched && chunks.size() > 1) throw Error("fake backend: out of device memory");
    ForwardResult r;
    for (const SequenceChunk& c : chunks) {
      auto& st = static_cast<FakeState&>(*c.state);
      st.history += chunk_key(c.token_ids);
      std::vector<std::vector<double>> hidden;  // taps = {position}: checks the rows passed on
      for (size_t i = 0; i < c.token_ids.size(); ++i)
        hidden.push_back({static_cast<double>(st.tokens + static_cast<int64_t>(i))});
      st.tokens += static_cast<int64_t>(c.token_ids.size());
      auto it = s_.logits.find(st.history);
      if (it == s_.logits.end()) {
        ++misses;
        r.logits.emplace_back(static_cast<size_t>(s_.vocab), 0.0);
      } else {
        r.logits.push_back(it->second);
      }
      r.main_hidden.push_back(std::move(hidden));
    }
    return r;
  }
  void dspark_prefill(SequenceState& state, const std::vector<std::vector<double>>& rows) override {
    auto& st = static_cast<FakeState&>(state);
    if (static_cast<int64_t>(rows.size()) != st.tokens) errors.push_back("prefill rows");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].at(0) != static_cast<double>(i)) errors.push_back("prefill row order");
    }
  }
  DraftResult dspark_step(SequenceState& state, int64_t input_id,
                          const std::vector<double>& row) override {
    auto& st = static_cast<FakeState&>(state);
    if (row.at(0) != static_cast<double>(st.tokens - 1)) errors.push_back("step row");
    auto it = s_.drafts.find(st.history + "#" + std::to_string(input_id));
    if (it != s_.drafts.end()) return it->second;
    ++draft_misses;
    DraftResult d;
    d.draft_ids.assign(static_cast<size_t>(s_.block), -1);
    d.confidence.assign(static_cast<size_t>(s_.block), 0.0);
    d.logits.assign(static_cast<size_t>(s_.block),
                    std::vector<double>(static_cast<size_t>(s_.vocab)));
    return d;
  }
  int64_t vocab_size() const override { return s_.vocab; }

  bool fail_batched = false;  // forward of several chunks throws (a backend error)
  int64_t misses = 0;
  int64_t draft_misses = 0;
  std::vector<std::string> errors;

 private:
  const Script& s_;
};

ReplayOptions options(Precision p, IndexKeyQuirk q) {
  ReplayOptions o;
  o.precision = p;
  o.quirk = q;
  return o;
}

const CaseReport& case_of_kind(const ReplayReport& r, FixtureCaseKind kind) {
  for (const CaseReport& c : r.cases) {
    if (c.kind == kind) return c;
  }
  throw Error("no case of that kind");
}

std::string first_case_name(FixtureCaseKind kind) {
  for (const FixtureCase& c : load_fixture_index(fixture_dir()).cases) {
    if (c.kind == kind) return c.name;
  }
  return "";
}

// Only `failing` fails (when given), with the rest passing.
void expect_only_failure(const ReplayReport& r, const std::string& failing) {
  for (const CaseReport& c : r.cases) {
    EXPECT_EQ(c.pass(), c.name != failing) << c.name;
  }
}

double std_of(const std::vector<double>& v) {
  double m = 0, var = 0;
  for (double x : v)
    m += x;
  m /= static_cast<double>(v.size());
  for (double x : v)
    var += (x - m) * (x - m);
  return std::sqrt(var / static_cast<double>(v.size()));
}

// Swaps the two largest entries: the argmax moves to the runner-up.
void flip_argmax(std::vector<double>& row) {
  const size_t a = static_cast<size_t>(argmax_lowest(row));
  size_t b = a == 0 ? 1 : 0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (i != a && row[i] > row[b]) b = i;
  }
  std::swap(row[a], row[b]);
}

TEST(FixtureCases, ParsesIndexTensorsAndMargins) {
  SKIP_WITHOUT_FIXTURE();
  const FixtureIndex idx = load_fixture_index(fixture_dir());
  const FixtureTensors t(fixture_dir() / "cases.safetensors");
  EXPECT_EQ(idx.format_version, 2);
  EXPECT_EQ(idx.behaviours, (std::vector<std::string>{"intended", "shipped"}));
  ASSERT_FALSE(idx.cases.empty());
  for (const FixtureCase& c : idx.cases) {
    for (const auto& [role, key] : c.inputs) {
      const FixtureTensor ids = t.load_ids(key, 2, &c.shape_of(key));
      EXPECT_EQ(ids.ids.size(), static_cast<size_t>(ids.numel()));
    }
    for (const std::string& beh : idx.behaviours) {
      for (const ExpectedRole& r : c.roles_for("fp64", beh)) {
        const FixtureTensor e = t.load(r.key, &c.shape_of(r.key));
        EXPECT_TRUE(e.is_ids() || e.dtype == DType::kF64) << r.key;
        EXPECT_TRUE(r.behaviour.empty() || r.behaviour == beh);
      }
      for (const ExpectedRole& r : c.roles_for("fp32", beh)) {
        const FixtureTensor e = t.load(r.key, &c.shape_of(r.key));
        EXPECT_TRUE(e.is_ids() || e.dtype == DType::kF32) << r.key;
      }
    }
  }
  // prefill.L17 has float32-level element near-ties in its forward (README §5.2).
  bool found = false;
  auto ties = find_near_ties(idx.margins, {"prefill.L17"}, {"fp64"}, {true, 0}, false, {}, &found);
  EXPECT_TRUE(found);
  ASSERT_FALSE(ties.empty());
  EXPECT_NE(ties.front().find("elem"), std::string::npos) << ties.front();
  find_near_ties(idx.margins, {"no-such-label"}, {"fp64"}, {true, 0}, false, {}, &found);
  EXPECT_FALSE(found);
  EXPECT_THROW(t.load("no.such.key"), Error);
  EXPECT_THROW(t.load_ids(idx.cases[0].expected.at("fp64").at(0).key, 2), Error);
}

TEST(FixtureReplay, ExactFp64ReplayPassesBothBehavioursAndDumps) {
  SKIP_WITHOUT_FIXTURE();
  testing::TempDir tmp;
  for (IndexKeyQuirk q : {IndexKeyQuirk::kIntended, IndexKeyQuirk::kShipped}) {
    const std::string beh = behaviour_label(q);
    const Script s = build_script("fp64", beh);
    FakeModel m(s);
    ReplayOptions o = options(Precision::kFp64, q);
    o.record_outputs = true;
    const ReplayReport r = replay_fixture(fixture_dir(), m, o);
    EXPECT_TRUE(r.pass()) << beh;
    EXPECT_EQ(m.misses, 0);
    EXPECT_EQ(m.draft_misses, 0);
    EXPECT_TRUE(m.errors.empty()) << m.errors.front();
    int64_t drafts = 0, ids = 0;
    for (const CaseReport& c : r.cases) {
      ASSERT_EQ(c.comparisons.size(), 1u);
      const CaseComparison& cmp = c.comparisons[0];
      EXPECT_EQ(cmp.max_rel, 0.0) << c.name;
      EXPECT_EQ(cmp.top1_agree, cmp.top1_total) << c.name;
      EXPECT_EQ(cmp.ids_agree, cmp.ids_total) << c.name;
      EXPECT_EQ(cmp.draft_agree, cmp.draft_total) << c.name;
      EXPECT_FALSE(cmp.first_divergence) << c.name;
      drafts += cmp.draft_total;
      ids += cmp.ids_total;
      if (c.kind == FixtureCaseKind::kPrefillThenDecode) {
        EXPECT_GT(cmp.draft_logit_rows, 0);
      }
    }
    EXPECT_GT(drafts, 0);
    EXPECT_GT(ids, 0);

    // The dump holds the fixture's own keys and, for an exact replay, its values.
    const fs::path dump = tmp / ("dump-" + beh + ".safetensors");
    write_replay_dump(dump, r);
    const FixtureTensors back(dump);
    const FixtureTensors ref(fixture_dir() / "cases.safetensors");
    size_t keys = 0;
    for (const FixtureCase& c : load_fixture_index(fixture_dir()).cases) {
      for (const ExpectedRole& role : c.roles_for("fp64", beh)) {
        ++keys;
        const FixtureTensor a = back.load(role.key), b = ref.load(role.key);
        EXPECT_EQ(a.dtype, b.dtype) << role.key;
        EXPECT_EQ(a.shape, b.shape) << role.key;
        EXPECT_EQ(a.values, b.values) << role.key;
        EXPECT_EQ(a.ids, b.ids) << role.key;
      }
    }
    EXPECT_EQ(r.outputs.size(), keys);
  }
}

TEST(FixtureReplay, RowOffByOneMillionthFailsStrict) {
  SKIP_WITHOUT_FIXTURE();
  const std::string name = first_case_name(FixtureCaseKind::kPrefillThenDecode);
  Script s = build_script("fp64", "intended");
  std::vector<double>& row = s.logits.at(s.where.at(where_key(name, 0, 7)));
  row[3] += 1e-6 * std_of(row);
  FakeModel m(s);
  const ReplayReport r =
      replay_fixture(fixture_dir(), m, options(Precision::kFp64, IndexKeyQuirk::kIntended));
  expect_only_failure(r, name);
  const CaseComparison& c = case_of_kind(r, FixtureCaseKind::kPrefillThenDecode).comparisons[0];
  EXPECT_NEAR(c.max_rel, 1e-6, 1e-9);
  EXPECT_EQ(c.max_rel_at, "step 7");
  EXPECT_EQ(c.first_divergence, "step 7");
  EXPECT_EQ(c.top1_agree, c.top1_total);
  EXPECT_EQ(c.draft_agree, c.draft_total);
  ASSERT_EQ(c.failures.size(), 1u);
  EXPECT_NE(c.failures[0].find("rel 1e-06 > 1e-09"), std::string::npos) << c.failures[0];
}

TEST(FixtureReplay, ArgmaxFlipInBatchRowFails) {
  SKIP_WITHOUT_FIXTURE();
  const std::string name = first_case_name(FixtureCaseKind::kPrefillThenDecodeBatched);
  Script s = build_script("fp64", "shipped");
  flip_argmax(s.logits.at(s.where.at(where_key(name, 1, 3))));
  FakeModel m(s);
  const ReplayReport r =
      replay_fixture(fixture_dir(), m, options(Precision::kFp64, IndexKeyQuirk::kShipped));
  expect_only_failure(r, name);
  const CaseComparison& c =
      case_of_kind(r, FixtureCaseKind::kPrefillThenDecodeBatched).comparisons[0];
  EXPECT_EQ(c.top1_agree, c.top1_total - 1);
  EXPECT_EQ(c.first_divergence, "row 1 step 3");
  EXPECT_EQ(m.misses, 0);  // teacher forcing: later steps are unaffected
}

TEST(FixtureReplay, GreedyFeedsItsOwnFlippedToken) {
  SKIP_WITHOUT_FIXTURE();
  const std::string name = first_case_name(FixtureCaseKind::kGreedyGeneration);
  Script s = build_script("fp64", "intended");
  flip_argmax(s.logits.at(s.where.at(where_key(name, 0, 5))));
  FakeModel m(s);
  const ReplayReport r =
      replay_fixture(fixture_dir(), m, options(Precision::kFp64, IndexKeyQuirk::kIntended));
  expect_only_failure(r, name);
  const CaseComparison& c = case_of_kind(r, FixtureCaseKind::kGreedyGeneration).comparisons[0];
  EXPECT_EQ(c.first_divergence, "step 5");
  EXPECT_LT(c.ids_agree, c.ids_total);
  EXPECT_GT(m.misses, 0);  // the engine continued from its own (different) token
}

TEST(FixtureReplay, DsparkDraftIdConfidenceAndLogitsPerturbationsFail) {
  SKIP_WITHOUT_FIXTURE();
  const std::string name = first_case_name(FixtureCaseKind::kPrefillThenDecode);
  const Script base = build_script("fp64", "intended");
  auto draft_at = [&](Script& s, int64_t k) -> DraftResult& {
    const std::string h = s.where.at(where_key(name, 0, k));
    for (auto& [key, d] : s.drafts) {
      if (key.rfind(h + "#", 0) == 0) return d;
    }
    throw Error("no draft");
  };
  {
    Script s = base;
    draft_at(s, 3).draft_ids[2] += 1;
    FakeModel m(s);
    const ReplayReport r =
        replay_fixture(fixture_dir(), m, options(Precision::kFp64, IndexKeyQuirk::kIntended));
    expect_only_failure(r, name);
    const CaseComparison& c = case_of_kind(r, FixtureCaseKind::kPrefillThenDecode).comparisons[0];
    EXPECT_EQ(c.draft_agree, c.draft_total - 1);
    EXPECT_EQ(c.first_draft_divergence, "step 3");
    EXPECT_FALSE(c.first_divergence);
    EXPECT_EQ(c.max_rel, 0.0);
  }
  {
    Script s = base;
    draft_at(s, 4).confidence[0] += 1e-8;
    FakeModel m(s);
    const ReplayReport r =
        replay_fixture(fixture_dir(), m, options(Precision::kFp64, IndexKeyQuirk::kIntended));
    expect_only_failure(r, name);
    const CaseComparison& c = case_of_kind(r, FixtureCaseKind::kPrefillThenDecode).comparisons[0];
    EXPECT_NEAR(c.max_confidence_abs, 1e-8, 1e-12);
    EXPECT_EQ(c.draft_agree, c.draft_total);
    EXPECT_EQ(c.first_draft_divergence, "step 4");
  }
  {
    // A draft-logits row at a recorded step.
    const FixtureIndex idx = load_fixture_index(fixture_dir());
    const FixtureTensors t(fixture_dir() / "cases.safetensors");
    const auto& key = *std::find_if(idx.cases.begin(), idx.cases.end(), [&](const auto& c) {
                         return c.name == name;
                       })->dspark_logit_steps_key;
    const int64_t step = t.load(key).ids.back();
    Script s = base;
    std::vector<double>& row = draft_at(s, step).logits[1];
    row[7] -= 1e-6 * std_of(row);
    FakeModel m(s);
    const ReplayReport r =
        replay_fixture(fixture_dir(), m, options(Precision::kFp64, IndexKeyQuirk::kIntended));
    expect_only_failure(r, name);
    const CaseComparison& c = case_of_kind(r, FixtureCaseKind::kPrefillThenDecode).comparisons[0];
    EXPECT_NEAR(c.max_draft_logits_rel, 1e-6, 1e-9);
    EXPECT_EQ(c.first_draft_divergence, "step " + std::to_string(step));
  }
}

TEST(FixtureReplay, Fp32RuleAcceptsTheReferencesOwnFlips) {
  SKIP_WITHOUT_FIXTURE();
  // The stored fp32 and fp64 values depart from each other by O(1) in several cases (README
  // §5.2), each time at recorded near-ties: either set, replayed as an fp32 engine's output,
  // passes against both.
  for (const char* prec : {"fp64", "fp32"}) {
    for (IndexKeyQuirk q : {IndexKeyQuirk::kIntended, IndexKeyQuirk::kShipped}) {
      const Script s = build_script(prec, behaviour_label(q));
      FakeModel m(s);
      const ReplayReport r = replay_fixture(fixture_dir(), m, options(Precision::kFp32, q));
      int64_t legit = 0;
      for (const CaseReport& c : r.cases) {
        ASSERT_EQ(c.comparisons.size(), 2u);
        EXPECT_EQ(c.comparisons[0].reference, "fp32");
        EXPECT_EQ(c.comparisons[1].reference, "fp64");
        for (const CaseComparison& cmp : c.comparisons) {
          EXPECT_TRUE(cmp.pass()) << prec << " " << c.name << ": " << cmp.failures.front();
          if (cmp.first_divergence) {
            EXPECT_NE(cmp.divergence_detail.find("near-tie"), std::string::npos);
            ++legit;
          }
        }
      }
      EXPECT_GT(legit, 0) << prec;
    }
  }
}

TEST(FixtureReplay, Fp32RuleJudgesAnEarlySplitByTheMargins) {
  SKIP_WITHOUT_FIXTURE();
  const FixtureIndex idx = load_fixture_index(fixture_dir());
  const std::string name = first_case_name(FixtureCaseKind::kPrefillThenDecode);
  const FixtureCase& c = *std::find_if(idx.cases.begin(), idx.cases.end(),
                                       [&](const FixtureCase& x) { return x.name == name; });
  const int64_t n_steps = c.shape_of(c.inputs.at("step_ids"))[1];
  auto has_tie = [&](int64_t k) {
    bool found = false;
    const auto ties = find_near_ties(idx.margins, {name + ":intended", name}, {"fp32", "fp64"},
                                     {false, k}, false, {}, &found);
    EXPECT_TRUE(found);
    return !ties.empty();
  };
  // A step with no backbone near-tie there or one forward earlier (the default lookback), and
  // a step with one, read from the tables.
  std::optional<int64_t> clean, tie;
  for (int64_t k = 1; k < n_steps && (!clean || !tie); ++k) {
    if (!clean && !has_tie(k) && !has_tie(k - 1)) clean = k;
    if (!tie && has_tie(k)) tie = k;
  }
  ASSERT_TRUE(clean && tie);
  for (int64_t k : {*clean, *tie}) {
    Script s = build_script("fp64", "intended");
    std::vector<double>& row = s.logits.at(s.where.at(where_key(name, 0, k)));
    row[static_cast<size_t>(argmax_lowest(row))] += 1e-3 * std_of(row);  // argmax kept
    FakeModel m(s);
    const ReplayReport r =
        replay_fixture(fixture_dir(), m, options(Precision::kFp32, IndexKeyQuirk::kIntended));
    const CaseComparison& vs64 =
        case_of_kind(r, FixtureCaseKind::kPrefillThenDecode).comparisons[1];
    ASSERT_EQ(vs64.reference, "fp64");
    EXPECT_EQ(vs64.first_divergence, "step " + std::to_string(k));
    if (k == *clean) {
      expect_only_failure(r, name);
      ASSERT_FALSE(vs64.pass());
      EXPECT_NE(vs64.failures[0].find("no near-tie"), std::string::npos) << vs64.failures[0];
    } else {
      EXPECT_TRUE(r.pass());
      EXPECT_NE(vs64.divergence_detail.find("near-tie:"), std::string::npos);
    }
  }
}

TEST(FixtureReplay, BackendErrorFailsOnlyItsCaseWithTheMessage) {
  SKIP_WITHOUT_FIXTURE();
  const Script s = build_script("fp64", "intended");
  FakeModel m(s);
  m.fail_batched = true;
  const ReplayReport r =
      replay_fixture(fixture_dir(), m, options(Precision::kFp64, IndexKeyQuirk::kIntended));
  const CaseReport& batched = case_of_kind(r, FixtureCaseKind::kPrefillThenDecodeBatched);
  expect_only_failure(r, batched.name);
  ASSERT_FALSE(batched.comparisons.empty());
  ASSERT_FALSE(batched.comparisons[0].failures.empty());
  const std::string& why = batched.comparisons[0].failures[0];
  EXPECT_NE(why.find("the backend failed"), std::string::npos) << why;
  EXPECT_NE(why.find("out of device memory"), std::string::npos) << why;
  EXPECT_GT(r.cases.size(), 1u);
}

TEST(FixtureReplay, MalformedFixturesNameFileAndKey) {
  SKIP_WITHOUT_FIXTURE();
  testing::TempDir tmp;
  fs::copy_file(fixture_dir() / "cases.safetensors", tmp / "cases.safetensors");
  nlohmann::json j = nlohmann::json::parse(testing::read_file(fixture_dir() / "cases.json"));
  const Script s = build_script("fp64", "intended");
  FakeModel m(s);
  auto expect_error = [&](const nlohmann::json& doc, const std::string& a, const std::string& b) {
    testing::write_file(tmp / "cases.json", doc.dump());
    try {
      replay_fixture(tmp.path(), m, options(Precision::kFp64, IndexKeyQuirk::kIntended));
      ADD_FAILURE() << "no error for " << b;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(a), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << e.what();
    }
  };
  {
    nlohmann::json bad = j;
    bad["cases"][0]["expected"]["fp64"]["logits"] = "renamed.fp64.logits";
    expect_error(bad, "cases.json", "renamed.fp64.logits");  // no shape listed for it
    bad["cases"][0]["shapes"]["renamed.fp64.logits"] = {1, 1280};
    expect_error(bad, "cases.safetensors", "renamed.fp64.logits");
  }
  {
    nlohmann::json bad = j;
    bad.erase("cases");
    expect_error(bad, "cases.json", "'cases'");
  }
  {
    nlohmann::json bad = j;
    bad["cases"][1]["kind"] = "speculate";
    expect_error(bad, "cases.json", "speculate");
  }
  {
    nlohmann::json bad = j;
    const std::string key = bad["cases"][0]["inputs"]["input_ids"];
    bad["cases"][0]["shapes"][key] = {1, 99};
    expect_error(bad, "cases.safetensors", key);
  }
  ReplayOptions o = options(Precision::kFp64, IndexKeyQuirk::kIntended);
  o.only_cases = {"no-such-case"};
  EXPECT_THROW(replay_fixture(fixture_dir(), m, o), Error);
}

}  // namespace
}  // namespace di
