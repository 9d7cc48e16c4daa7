// Named intermediates of the V4.1 CPU forward against the reference's layer trace of fixture A
// (fixtures TRACE.md): with the fp64 engine every shared name matches to the trace's float32
// storage precision, ids and indices exactly; tracing changes no output bit.

#include "model/trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "loader/safetensors.h"
#include "model/deepseek_v41/cpu_model.h"
#include "model/fixture_replay.h"
#include "tests_support/fixture_paths.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

namespace fs = std::filesystem;

using testing_support::kTinyFixtureA;

// "decode.step0.layer.3.attn.q" -> "attn.q" (run and layer stripped).
std::string item_of(const std::string& name, const std::vector<std::string>& runs) {
  for (const std::string& run : runs) {
    if (name.rfind(run + ".", 0) != 0) continue;
    std::string rest = name.substr(run.size() + 1);
    if (rest.rfind("layer.", 0) == 0) rest = rest.substr(rest.find('.', 6) + 1);
    return rest;
  }
  return name;
}

class V41Trace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTinyFixtureA / "trace.safetensors") ||
        !fs::exists(kTinyFixtureA / "cases.json"))
      GTEST_SKIP() << "fixture trace absent";
    ForwardOptions opts;
    opts.precision = Precision::kFp64;
    model_ = load_cpu_forward_model(kTinyFixtureA, opts);
  }
  std::unique_ptr<ForwardModel> model_;
};

TEST_F(V41Trace, Fp64IntermediatesMatchTheReferenceTrace) {
  TraceRecorder rec;
  const std::vector<std::string> runs = run_trace_forwards(kTinyFixtureA, *model_, rec);
  ASSERT_EQ(runs.size(), 8u);  // prefill_L17, decode.step-1, decode.step0..5
  std::vector<std::string> prefixes;
  for (const std::string& r : runs)
    prefixes.push_back(r + ".");
  const TraceDiff d = compare_trace(rec, kTinyFixtureA / "trace.safetensors", 1e-6, prefixes);

  for (const TraceDiffEntry& e : d.entries) {
    EXPECT_TRUE(e.shape_ok) << e.name;
    if (e.is_ids) {
      EXPECT_EQ(e.mismatches, 0) << e.name;
    } else {
      EXPECT_LE(e.rel, 1e-6) << e.name << " (unrounded " << e.raw_rel << ")";
      // TRACE.md §4: a float64 path is within the float32 storage rounding (<= 3e-6 of std).
      EXPECT_LE(e.raw_rel, 4e-6) << e.name;
    }
  }
  if (d.first_failure) ADD_FAILURE() << "first departure: " << d.entries[*d.first_failure].name;
  // Every tensor of the trace is produced by the engine.
  EXPECT_TRUE(d.reference_only.empty())
      << d.reference_only.size() << " reference names missing, e.g. " << d.reference_only.front();

  std::set<std::string> covered;
  for (const TraceDiffEntry& e : d.entries)
    covered.insert(item_of(e.name, runs));
  for (const char* core : {"input_ids",
                           "start_pos",
                           "in",
                           "attn_mix.pre",
                           "attn_mix.comb",
                           "attn.x",
                           "attn.qr",
                           "attn.q",
                           "attn.kv",
                           "compress.latent",
                           "index.q",
                           "index.k",
                           "index.score",
                           "index.candidates",
                           "index.topk",
                           "compress.kv",
                           "attn.o",
                           "attn.out",
                           "mid",
                           "ffn_mix.pre",
                           "ffn.x",
                           "ffn.router.scores",
                           "ffn.router.ids",
                           "ffn.router.weights",
                           "ffn.out",
                           "out",
                           "engram.hash_ids",
                           "engram.value",
                           "engram.gate",
                           "engram.delta",
                           "final.x",
                           "final.logits",
                           "dspark.main_hidden"}) {
    EXPECT_TRUE(covered.count(core)) << core << " not compared";
  }
  EXPECT_GE(d.entries.size(), 2000u);
  // Layer inputs of every layer in every run.
  for (const std::string& run : runs) {
    for (int layer = 0; layer < 12; ++layer) {
      const std::string name = run + ".layer." + std::to_string(layer) + ".in";
      EXPECT_TRUE(std::any_of(d.entries.begin(), d.entries.end(), [&](const TraceDiffEntry& e) {
        return e.name == name;
      })) << name;
    }
  }
}

TEST_F(V41Trace, TracingChangesNoOutputBit) {
  // The decode protocol's prompt with and without a tracer installed, then one step + DSpark.
  auto run = [&](TraceRecorder* rec) {
    model_->set_tracer(rec);
    if (rec != nullptr) rec->set_run("a");
    const std::vector<int64_t> prompt = {5, 17, 42, 99, 7, 300, 12, 64, 8, 1000, 3};
    auto st = model_->new_sequence();
    SequenceChunk pre{st.get(), prompt};
    ForwardResult r = model_->forward({&pre, 1});
    model_->dspark_prefill(*st, r.main_hidden[0]);
    if (rec != nullptr) rec->set_run("b");
    const int64_t next = 77;
    SequenceChunk step{st.get(), std::span<const int64_t>(&next, 1)};
    ForwardResult s = model_->forward({&step, 1});
    const DraftResult dr = model_->dspark_step(*st, 11, s.main_hidden[0][0]);
    model_->set_tracer(nullptr);
    std::vector<double> out = r.logits[0];
    out.insert(out.end(), s.logits[0].begin(), s.logits[0].end());
    out.insert(out.end(), dr.confidence.begin(), dr.confidence.end());
    for (const auto& row : dr.logits)
      out.insert(out.end(), row.begin(), row.end());
    return out;
  };
  const std::vector<double> plain = run(nullptr);
  TraceRecorder rec;
  const std::vector<double> traced = run(&rec);
  EXPECT_EQ(plain, traced);
  EXPECT_NE(rec.find("a.layer.0.attn.q"), nullptr);
  EXPECT_NE(rec.find("a.dspark.layer.0.attn.main_kv"), nullptr);
  EXPECT_NE(rec.find("b.dspark.layer.0.attn.q"), nullptr);
  EXPECT_NE(rec.find("b.dspark.logits"), nullptr);
}

TEST(TraceRecorder, WritesSafetensorsAndRejectsDuplicates) {
  TraceRecorder rec;
  rec.set_run("r");
  const std::vector<double> v = {1.5, -2.0, 3.25, 0.0, -0.5, 8.0};
  const std::vector<int64_t> ids = {3, -1};
  rec.record("layer.0.x", v, {2, 3});
  rec.record_ids("layer.0.topk", ids, {2});
  EXPECT_THROW(rec.record("layer.0.x", v, {6}), Error);
  EXPECT_THROW(rec.record("bad.shape", v, {4}), Error);
  testing::TempDir dir;
  const fs::path path = dir.path() / "t.safetensors";
  rec.write_safetensors(path, DType::kF32);
  const SafetensorsFile f(path.string());
  ASSERT_NE(f.find("r.layer.0.x"), nullptr);
  EXPECT_EQ(f.view("r.layer.0.x").dtype, DType::kF32);
  EXPECT_EQ(f.view("r.layer.0.x").shape.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.view("r.layer.0.topk").as<int64_t>()[1], -1);
  // A recorder compared with its own dump agrees everywhere.
  const TraceDiff d = compare_trace(rec, path, 0.0);
  EXPECT_EQ(d.entries.size(), 2u);
  EXPECT_FALSE(d.first_failure.has_value());
  EXPECT_TRUE(d.reference_only.empty());
}

}  // namespace
}  // namespace di
