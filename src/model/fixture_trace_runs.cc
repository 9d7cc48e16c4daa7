// The traced runs of a fixture (prefill + decode steps named like the fixture's TRACE.md), used
// by `deepinfer replay-fixture --dump-layers/--compare-trace` to bisect a mismatch by name.

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "model/fixture_cases.h"
#include "model/fixture_replay.h"
#include "model/trace.h"

namespace di {

namespace {

// Uninstalls the tracer however the traced runs end.
struct TracerInstall {
  TracerInstall(ForwardModel& m, ForwardTracer* t) : model(m) { model.set_tracer(t); }
  ~TracerInstall() { model.set_tracer(nullptr); }
  TracerInstall(const TracerInstall&) = delete;
  TracerInstall& operator=(const TracerInstall&) = delete;
  ForwardModel& model;
};

const FixtureCase& case_named(const FixtureIndex& idx, const std::string& name) {
  for (const FixtureCase& c : idx.cases) {
    if (c.name == name) return c;
  }
  throw Error(fmt::format("{}: no case named '{}'", idx.json_path.string(), name));
}

// Row 0 of the I64 [B, L] input `role` of case `c`.
std::vector<int64_t> input_row(const FixtureCase& c, const FixtureTensors& tensors,
                               const std::string& role) {
  auto it = c.inputs.find(role);
  if (it == c.inputs.end())
    throw Error(fmt::format("cases.json: case '{}' has no input '{}'", c.name, role));
  const FixtureTensor t = tensors.load_ids(it->second, 2, &c.shape_of(it->second));
  if (t.shape[0] < 1 || t.shape[1] < 1)
    throw Error(fmt::format("case '{}': input '{}' is empty", c.name, it->second));
  return {t.ids.begin(), t.ids.begin() + t.shape[1]};
}

}  // namespace

std::vector<std::string> run_trace_forwards(const std::filesystem::path& fixture_dir,
                                            ForwardModel& model, TraceRecorder& recorder,
                                            const TraceRunOptions& opts) {
  const FixtureIndex idx = load_fixture_index(fixture_dir);
  const FixtureTensors tensors(fixture_dir / "cases.safetensors");
  const FixtureCase& pc = case_named(idx, opts.prefill_case);
  if (pc.inputs.size() != 1)
    throw Error(fmt::format("case '{}' has {} inputs; the trace prefill needs one", pc.name,
                            pc.inputs.size()));
  const std::vector<int64_t> prefill_ids = input_row(pc, tensors, pc.inputs.begin()->first);
  const FixtureCase& dc = case_named(idx, opts.decode_case);
  const std::vector<int64_t> prompt = input_row(dc, tensors, "prompt_ids");
  const std::vector<int64_t> step_ids = input_row(dc, tensors, "step_ids");
  const int64_t steps = std::min<int64_t>(opts.decode_steps, static_cast<int64_t>(step_ids.size()));

  std::vector<std::string> runs;
  const TracerInstall install(model, &recorder);
  auto forward = [&](SequenceState& st, std::span<const int64_t> ids) {
    const SequenceChunk chunk{&st, ids};
    ForwardResult r = model.forward({&chunk, 1});
    if (r.logits.size() != 1) throw Error("trace run: the model returned no logits");
    return r;
  };
  runs.push_back(opts.prefill_run);
  recorder.set_run(runs.back());
  forward(*model.new_sequence(), prefill_ids);

  const std::string decode_run = opts.decode_case;
  runs.push_back(decode_run + ".step-1");
  recorder.set_run(runs.back());
  const std::unique_ptr<SequenceState> st = model.new_sequence();
  ForwardResult res = forward(*st, prompt);
  const bool dspark =
      !res.main_hidden.empty() && !res.main_hidden[0].empty() && !res.main_hidden[0][0].empty();
  if (dspark) model.dspark_prefill(*st, res.main_hidden[0]);
  for (int64_t k = 0; k < steps; ++k) {
    runs.push_back(fmt::format("{}.step{}", decode_run, k));
    recorder.set_run(runs.back());
    res = forward(*st, std::span<const int64_t>(step_ids).subspan(static_cast<size_t>(k), 1));
    if (dspark) model.dspark_step(*st, argmax_lowest(res.logits[0]), res.main_hidden[0][0]);
  }
  recorder.set_run("");
  return runs;
}

}  // namespace di
