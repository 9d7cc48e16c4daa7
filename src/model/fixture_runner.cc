// Running a fixture case through a model (the engine side of the fixture replay).

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
#include "model/fixture_replay_detail.h"
#include "model/trace.h"

namespace di::fixture_detail {

std::vector<std::pair<std::string, std::string>> prefill_pairs(
    const FixtureCase& c, const std::vector<ExpectedRole>& roles) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::set<std::string> used;
  for (const auto& [input_role, key] : c.inputs) {
    const ExpectedRole* match = nullptr;
    for (const ExpectedRole& r : roles) {
      if (r.role == input_role) match = &r;
    }
    if (!match && c.inputs.size() == 1) {
      for (const ExpectedRole& r : roles) {
        if (r.field == "logits") match = &r;
      }
    }
    if (!match)
      throw Error(fmt::format("cases.json: case '{}': no expected logits for input '{}'", c.name,
                              input_role));
    pairs.emplace_back(input_role, match->role);
    used.insert(match->role);
  }
  for (const ExpectedRole& r : roles) {
    if (!used.count(r.role))
      throw Error(
          fmt::format("cases.json: case '{}': expected '{}' matches no input", c.name, r.role));
  }
  return pairs;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Running a case through the model.

class CaseRunner {
 public:
  CaseRunner(ForwardModel& model, const FixtureCase& c, const FixtureTensors& tensors,
             const std::string& precision, const std::string& behaviour, CaseReport& report)
      : model_(model),
        case_(c),
        tensors_(tensors),
        roles_(c.roles_for(precision, behaviour)),
        report_(report),
        vocab_(model.vocab_size()) {}

  RoleTensors run() {
    switch (case_.kind) {
      case FixtureCaseKind::kPrefill:
        run_prefill();
        break;
      case FixtureCaseKind::kPrefillThenDecode:
      case FixtureCaseKind::kPrefillThenDecodeBatched:
        run_steps(/*greedy=*/false);
        break;
      case FixtureCaseKind::kGreedyGeneration:
        run_steps(/*greedy=*/true);
        break;
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("case '{}': {}", case_.name, what));
  }

  // Runs a call into the model; its errors become BackendError (the case fails, the replay goes
  // on).
  template <typename F>
  decltype(auto) backend(F&& call) const {
    try {
      return call();
    } catch (const BackendError&) {
      throw;
    } catch (const Error& e) {
      throw BackendError(e.what(), e.message());
    }
  }

  const ExpectedRole* role(const std::string& field) const {
    for (const ExpectedRole& r : roles_) {
      if (r.field == field) return &r;
    }
    return nullptr;
  }

  // A zero tensor for `r` with the shape cases.json gives, checked against `dims` (-1: any).
  FixtureTensor& make(const ExpectedRole& r, std::initializer_list<int64_t> dims) {
    FixtureTensor t;
    t.key = r.key;
    t.shape = case_.shape_of(r.key);
    if (t.shape.size() != dims.size()) {
      fail(fmt::format("'{}' has rank {}; expected {}", r.key, t.shape.size(), dims.size()));
    }
    size_t i = 0;
    for (int64_t d : dims) {
      if (d >= 0 && t.shape[i] != d) {
        fail(fmt::format("'{}' has shape [{}]; dimension {} should be {}", r.key,
                         fmt::join(t.shape, ", "), i, d));
      }
      ++i;
    }
    t.dtype = is_id_field(r.field) ? DType::kI64 : DType::kF64;
    if (t.is_ids()) {
      t.ids.assign(static_cast<size_t>(t.numel()), -1);
    } else {
      t.values.assign(static_cast<size_t>(t.numel()), 0.0);
    }
    return out_[r.role] = std::move(t);
  }

  FixtureTensor input(const std::string& input_role) const {
    auto it = case_.inputs.find(input_role);
    if (it == case_.inputs.end()) fail(fmt::format("cases.json lists no input '{}'", input_role));
    FixtureTensor t = tensors_.load_ids(it->second, 2, &case_.shape_of(it->second));
    if (t.shape[0] < 1) fail(fmt::format("input '{}' has no rows", it->second));
    return t;
  }

  // One backbone forward: chunk b continues sequence b with tokens[b].
  ForwardResult forward(const std::vector<std::unique_ptr<SequenceState>>& states,
                        const std::vector<std::vector<int64_t>>& tokens, bool need_hidden) {
    std::vector<SequenceChunk> chunks;
    for (size_t b = 0; b < states.size(); ++b)
      chunks.push_back({states[b].get(), tokens[b]});
    ForwardResult r = backend([&] { return model_.forward(chunks); });
    ++report_.forwards;
    if (r.logits.size() != chunks.size())
      fail(fmt::format("model returned {} logits rows for {} chunks", r.logits.size(),
                       chunks.size()));
    for (const auto& row : r.logits) {
      if (static_cast<int64_t>(row.size()) != vocab_)
        fail(fmt::format("model returned a logits row of {} values; vocab is {}", row.size(),
                         vocab_));
    }
    if (need_hidden) {
      if (r.main_hidden.size() != chunks.size())
        fail(fmt::format("model returned main_hidden for {} of {} chunks (no DSpark stages?)",
                         r.main_hidden.size(), chunks.size()));
      for (size_t b = 0; b < chunks.size(); ++b) {
        if (r.main_hidden[b].size() != tokens[b].size())
          fail(fmt::format("model returned {} main_hidden rows for a chunk of {} tokens",
                           r.main_hidden[b].size(), tokens[b].size()));
      }
    }
    return r;
  }

  std::vector<std::unique_ptr<SequenceState>> new_states(int64_t n) const {
    std::vector<std::unique_ptr<SequenceState>> states;
    for (int64_t b = 0; b < n; ++b)
      states.push_back(backend([&] { return model_.new_sequence(); }));
    return states;
  }

  static std::vector<std::vector<int64_t>> rows_of(const FixtureTensor& ids) {
    std::vector<std::vector<int64_t>> rows;
    for (int64_t b = 0; b < ids.shape[0]; ++b) {
      auto r = ids_at(ids, {b});
      rows.emplace_back(r.begin(), r.end());
    }
    return rows;
  }

  void run_prefill() {
    for (const auto& [input_role, role_name] : prefill_pairs(case_, roles_)) {
      const FixtureTensor ids = input(input_role);
      const int64_t batch = ids.shape[0];
      const ExpectedRole* r = nullptr;
      for (const ExpectedRole& x : roles_) {
        if (x.role == role_name) r = &x;
      }
      FixtureTensor& logits = make(*r, {batch, vocab_});
      auto states = new_states(batch);
      const ForwardResult res = forward(states, rows_of(ids), false);
      for (int64_t b = 0; b < batch; ++b) {
        std::copy(res.logits[static_cast<size_t>(b)].begin(),
                  res.logits[static_cast<size_t>(b)].end(), values_at(logits, {b}).begin());
      }
    }
  }

  // DSpark outputs of a decode/greedy case: [B, steps, block] plus draft logits at listed steps.
  struct DraftOutputs {
    FixtureTensor* input_ids = nullptr;
    FixtureTensor* draft_ids = nullptr;
    FixtureTensor* confidence = nullptr;
    FixtureTensor* draft_logits = nullptr;
    std::map<int64_t, int64_t> logit_slot;  // dspark step -> index into draft_logits dim 1
    int64_t block = -1;
  };

  DraftOutputs make_draft_outputs(int64_t batch, int64_t steps) {
    DraftOutputs d;
    if (const ExpectedRole* r = role("dspark_draft_ids")) {
      d.draft_ids = &make(*r, {batch, steps, -1});
      d.block = d.draft_ids->shape[2];
    }
    if (const ExpectedRole* r = role("dspark_confidence")) {
      d.confidence = &make(*r, {batch, steps, d.block});
      d.block = d.confidence->shape[2];
    }
    if (const ExpectedRole* r = role("dspark_input_ids")) d.input_ids = &make(*r, {batch, steps});
    if (const ExpectedRole* r = role("dspark_draft_logits")) {
      d.draft_logits = &make(*r, {batch, -1, d.block, vocab_});
      d.block = d.draft_logits->shape[2];
      if (!case_.dspark_logit_steps_key) fail("has dspark_draft_logits but no dspark_logit_steps");
      const FixtureTensor st = tensors_.load_ids(*case_.dspark_logit_steps_key, 1);
      if (st.shape[0] != d.draft_logits->shape[1])
        fail(fmt::format("'{}' lists {} steps but '{}' holds {}", st.key, st.shape[0],
                         d.draft_logits->key, d.draft_logits->shape[1]));
      for (int64_t j = 0; j < st.shape[0]; ++j) {
        const int64_t s = st.ids[static_cast<size_t>(j)];
        if (s < 0 || s >= steps) fail(fmt::format("'{}' lists step {} of {}", st.key, s, steps));
        d.logit_slot[s] = j;
      }
    }
    return d;
  }

  void record_draft(DraftOutputs& d, int64_t b, int64_t step, int64_t input_id,
                    const DraftResult& r) {
    const auto block = static_cast<size_t>(d.block);
    if (d.input_ids) ids_at(*d.input_ids, {b, step})[0] = input_id;
    if (d.draft_ids) {
      if (r.draft_ids.size() != block)
        fail(fmt::format("dspark_step returned {} draft ids; the fixture has blocks of {}",
                         r.draft_ids.size(), block));
      std::copy(r.draft_ids.begin(), r.draft_ids.end(), ids_at(*d.draft_ids, {b, step}).begin());
    }
    if (d.confidence) {
      if (r.confidence.size() != block)
        fail(fmt::format("dspark_step returned {} confidences; the fixture has blocks of {}",
                         r.confidence.size(), block));
      std::copy(r.confidence.begin(), r.confidence.end(),
                values_at(*d.confidence, {b, step}).begin());
    }
    auto it = d.logit_slot.find(step);
    if (d.draft_logits && it != d.logit_slot.end()) {
      if (r.logits.size() != block)
        fail(fmt::format("dspark_step returned {} draft-logits rows; expected {}", r.logits.size(),
                         block));
      for (size_t j = 0; j < block; ++j) {
        if (static_cast<int64_t>(r.logits[j].size()) != vocab_)
          fail(fmt::format("dspark_step returned a draft-logits row of {} values; vocab is {}",
                           r.logits[j].size(), vocab_));
        std::copy(r.logits[j].begin(), r.logits[j].end(),
                  values_at(*d.draft_logits, {b, it->second, static_cast<int64_t>(j)}).begin());
      }
    }
  }

  void check_known_fields(bool greedy) const {
    static const std::set<std::string> kDecode = {"prefill_logits",    "logits",
                                                  "dspark_input_ids",  "dspark_draft_ids",
                                                  "dspark_confidence", "dspark_draft_logits"};
    static const std::set<std::string> kGreedy = {"ids",
                                                  "logits",
                                                  "dspark_input_ids",
                                                  "dspark_draft_ids",
                                                  "dspark_confidence",
                                                  "dspark_draft_logits"};
    for (const ExpectedRole& r : roles_) {
      if (!(greedy ? kGreedy : kDecode).count(r.field))
        fail(fmt::format("expected field '{}' is not defined for kind '{}'", r.field,
                         case_.kind_name));
    }
  }

  // prefill_then_decode[_batched] (teacher-forced with step_ids) and greedy_generation.
  void run_steps(bool greedy) {
    check_known_fields(greedy);
    const FixtureTensor prompt = input("prompt_ids");
    const int64_t batch = prompt.shape[0];
    std::optional<FixtureTensor> step_ids;
    int64_t n_steps = 0;  // backbone forwards after the prefill
    FixtureTensor* logits = nullptr;
    FixtureTensor* prefill_logits = nullptr;
    FixtureTensor* gen_ids = nullptr;
    const ExpectedRole* lr = role("logits");
    if (!lr) fail("has no expected 'logits'");
    if (greedy) {
      logits = &make(*lr, {batch, -1, vocab_});
      const int64_t total = logits->shape[1];
      if (total < 1) fail("generates no tokens");
      if (const ExpectedRole* r = role("ids")) gen_ids = &make(*r, {batch, total});
      n_steps = total - 1;
    } else {
      step_ids = input("step_ids");
      if (step_ids->shape[0] != batch) fail("prompt_ids and step_ids differ in batch size");
      n_steps = step_ids->shape[1];
      logits = &make(*lr, {batch, n_steps, vocab_});
      if (const ExpectedRole* r = role("prefill_logits"))
        prefill_logits = &make(*r, {batch, vocab_});
    }
    bool dspark = false;
    for (const ExpectedRole& r : roles_)
      dspark = dspark || is_dspark_field(r.field);
    DraftOutputs drafts;
    if (dspark) drafts = make_draft_outputs(batch, n_steps);

    auto states = new_states(batch);
    ForwardResult res = forward(states, rows_of(prompt), dspark);
    std::vector<int64_t> last(static_cast<size_t>(batch));  // greedy: the latest generated id
    for (int64_t b = 0; b < batch; ++b) {
      const auto& row = res.logits[static_cast<size_t>(b)];
      if (greedy) {
        std::copy(row.begin(), row.end(), values_at(*logits, {b, 0}).begin());
        last[static_cast<size_t>(b)] = argmax_lowest(row);
        if (gen_ids) ids_at(*gen_ids, {b})[0] = last[static_cast<size_t>(b)];
      } else if (prefill_logits) {
        std::copy(row.begin(), row.end(), values_at(*prefill_logits, {b}).begin());
      }
      if (dspark)
        backend([&] {
          model_.dspark_prefill(*states[static_cast<size_t>(b)],
                                res.main_hidden[static_cast<size_t>(b)]);
        });
    }
    for (int64_t k = 0; k < n_steps; ++k) {
      std::vector<std::vector<int64_t>> tokens;
      for (int64_t b = 0; b < batch; ++b) {
        tokens.push_back({greedy ? last[static_cast<size_t>(b)] : ids_at(*step_ids, {b, k})[0]});
      }
      res = forward(states, tokens, dspark);
      // Greedy: this forward produced ids[:, k+1]; teacher forcing: logits[:, k].
      const int64_t slot = greedy ? k + 1 : k;
      for (int64_t b = 0; b < batch; ++b) {
        const auto& row = res.logits[static_cast<size_t>(b)];
        std::copy(row.begin(), row.end(), values_at(*logits, {b, slot}).begin());
        const int64_t next = argmax_lowest(row);
        if (greedy) {
          last[static_cast<size_t>(b)] = next;
          if (gen_ids) ids_at(*gen_ids, {b})[static_cast<size_t>(slot)] = next;
        }
        if (dspark) {
          // README §4: the drafter's input is the token sampled from this step (argmax).
          const DraftResult dr = backend([&] {
            return model_.dspark_step(*states[static_cast<size_t>(b)], next,
                                      res.main_hidden[static_cast<size_t>(b)][0]);
          });
          ++report_.draft_steps;
          record_draft(drafts, b, k, next, dr);
        }
      }
    }
  }

  ForwardModel& model_;
  const FixtureCase& case_;
  const FixtureTensors& tensors_;
  std::vector<ExpectedRole> roles_;
  CaseReport& report_;
  int64_t vocab_;
  RoleTensors out_;
};

}  // namespace

RoleTensors run_case(ForwardModel& model, const FixtureCase& c, const FixtureTensors& tensors,
                     const std::string& precision, const std::string& behaviour,
                     CaseReport& report) {
  return CaseRunner(model, c, tensors, precision, behaviour, report).run();
}

}  // namespace di::fixture_detail
