#include "engine/engine_core.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/logging.h"
#include "engine/request_seed.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"

namespace di {

EngineCore::EngineCore(ForwardModel& model, const Tokenizer& tokenizer,
                       const ModelConfig& model_config, const StateBytes& state_bytes,
                       const EngineCoreConfig& config)
    : model_(model),
      tokenizer_(tokenizer),
      model_config_(model_config),
      config_(config),
      cache_(state_bytes, config.cache),
      start_(std::chrono::steady_clock::now()) {
  validate_scheduler_config(config_.scheduler);
}

double EngineCore::seconds_since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

int64_t EngineCore::add_request(NewRequest spec) {
  const int64_t id = next_id_++;
  Request& r = requests_[id];
  r.id = id;
  r.spec = std::move(spec);
  r.out.request_id = r.spec.request_id.empty() ? std::to_string(id) : r.spec.request_id;
  r.out.prompt = r.spec.prompt;
  r.out.prompt_token_ids = r.spec.prompt_token_ids;
  r.out.outputs.resize(1);
  r.out.metrics.arrival_time = seconds_since_start();
  r.tokens = r.spec.prompt_token_ids;
  r.num_prompt = static_cast<int64_t>(r.tokens.size());
  r.seed = r.spec.params.seed ? *r.spec.params.seed : derive_request_seed(config_.seed, id);
  std::string error = r.spec.error;
  if (error.empty()) error = r.spec.params.validate(model_.vocab_size());
  if (error.empty() && r.tokens.empty()) error = "the prompt is empty";
  if (error.empty()) {
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      if (r.tokens[i] < 0 || r.tokens[i] >= model_.vocab_size()) {
        error = fmt::format("prompt token [{}] = {} is outside the vocabulary [0, {})", i,
                            r.tokens[i], model_.vocab_size());
        break;
      }
    }
  }
  if (!error.empty()) {
    r.rejection = Status(StatusCode::kInvalidArgument, error);
    return id;
  }
  r.detok = std::make_unique<IncrementalDetokenizer>(tokenizer_, r.spec.params.skip_special_tokens);
  r.stop =
      std::make_unique<StopChecker>(r.spec.params.stop, r.spec.params.include_stop_str_in_output);
  if (r.spec.params.prompt_logprobs) r.out.prompt_logprobs.assign(1, std::nullopt);
  return id;
}

void EngineCore::abort(int64_t id) {
  auto it = requests_.find(id);
  if (it != requests_.end()) it->second.aborted = true;
}

void EngineCore::refresh_output(Request& r, bool finished) {
  deepinfer::CompletionOutput& c = r.out.outputs[0];
  c.token_ids.assign(r.tokens.begin() + r.num_prompt, r.tokens.end());
  if (r.stop) c.text = std::string(r.stop->stable_text(finished));
  if (r.spec.parser) r.spec.parser(c, finished);
  r.out.finished = finished;
}

void EngineCore::finish(Request& r, std::string reason, std::string stop_reason) {
  if (r.detok && reason != "error") {
    const std::string tail = r.detok->finish();
    if (!tail.empty() && r.stop && !r.stop->stopped()) {
      if (auto s = r.stop->append(tail)) {
        reason = "stop";
        stop_reason = *s;
      }
    }
  }
  if (cache_.contains(r.id)) cache_.free(r.id);
  r.state.reset();
  deepinfer::CompletionOutput& c = r.out.outputs[0];
  c.finish_reason = std::move(reason);
  c.stop_reason = std::move(stop_reason);
  const double now = seconds_since_start();
  deepinfer::RequestMetrics& m = r.out.metrics;
  m.finished_time = now;
  const auto generated = static_cast<int64_t>(r.tokens.size()) - r.num_prompt;
  if (generated > 1) m.tpot = (m.finished_time - m.first_token_time) / double(generated - 1);
  refresh_output(r, true);
  if (c.finish_reason == "error") {
    ++totals_.failed;
  } else {
    ++totals_.finished;
    totals_.prompt_tokens += r.num_prompt;
    totals_.generated_tokens += generated;
  }
}

void EngineCore::fail(Request& r, const std::string& message) {
  r.out.error = message;
  finish(r, "error", "");
}

deepinfer::PositionLogprobs EngineCore::to_position_logprobs(const RowLogprobs& lp) const {
  deepinfer::PositionLogprobs out;
  auto add = [&](const TokenLogprob& t) {
    const auto id32 = static_cast<int32_t>(t.token_id);
    out[t.token_id] =
        deepinfer::Logprob{t.logprob, t.rank, tokenizer_.decode(std::span(&id32, 1), false)};
  };
  for (const TokenLogprob& t : lp.top)
    add(t);
  add(lp.token);
  return out;
}

void EngineCore::record_prompt_logprobs(Request& r, int64_t start, int64_t count,
                                        const std::vector<double>& all_logits) {
  // Row k of the chunk holds the logits after position start + k, i.e. the distribution of the
  // token at start + k + 1; prompt logprobs cover prompt positions 1 .. num_prompt - 1.
  const int64_t V = model_.vocab_size();
  const int64_t n = *r.spec.params.prompt_logprobs;
  std::vector<float> row(static_cast<size_t>(V));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t target = start + k + 1;
    if (target >= r.num_prompt) break;
    if (target < static_cast<int64_t>(r.out.prompt_logprobs.size())) continue;  // recomputed
    const double* src = all_logits.data() + k * V;
    for (int64_t v = 0; v < V; ++v)
      row[static_cast<size_t>(v)] = static_cast<float>(src[v]);
    r.out.prompt_logprobs.emplace_back(
        to_position_logprobs(compute_row_logprobs(row, r.tokens[static_cast<size_t>(target)], n)));
  }
}

SamplerRow EngineCore::sampler_row(const Request& r) const {
  const auto generated = static_cast<int64_t>(r.tokens.size()) - r.num_prompt;
  SamplerRow in;
  in.seed = r.seed;
  in.position = static_cast<int64_t>(r.tokens.size());
  in.prompt_ids = std::span<const int64_t>(r.tokens.data(), static_cast<size_t>(r.num_prompt));
  in.output_ids =
      std::span<const int64_t>(r.tokens.data() + r.num_prompt, static_cast<size_t>(generated));
  in.eos_ids = std::span<const int64_t>(&model_config_.eos_token_id, 1);
  in.suppress_stop_tokens = generated < r.spec.params.min_tokens;
  return in;
}

SampleOutcome EngineCore::sample_on_host(const Request& r, const std::vector<double>& logits) {
  SampleOutcome out;
  try {
    DI_CHECK(static_cast<int64_t>(logits.size()) == model_.vocab_size(),
             "the forward returned {} logits for request {}, expected {}", logits.size(),
             r.out.request_id, model_.vocab_size());
    row_.assign(logits.begin(), logits.end());
    SamplerRow in = sampler_row(r);
    in.logits = row_;
    out.result = sample_row(r.spec.params, in, scratch_);
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

bool EngineCore::append_sampled(Request& r, const SampleOutcome& outcome) {
  if (!outcome.error.empty()) {
    fail(r, fmt::format("sampling failed: {}", outcome.error));
    return true;
  }
  const SampleResult& s = outcome.result;
  const deepinfer::SamplingParams& p = r.spec.params;
  const auto generated = static_cast<int64_t>(r.tokens.size()) - r.num_prompt;
  const int64_t eos = model_config_.eos_token_id;
  const int64_t token = s.token_id;
  r.tokens.push_back(token);
  deepinfer::CompletionOutput& c = r.out.outputs[0];
  if (s.logprobs) {
    c.logprobs.push_back(to_position_logprobs(*s.logprobs));
    c.cumulative_logprob += s.logprobs->token.logprob;
  }
  const double now = seconds_since_start();
  if (generated == 0) {
    r.out.metrics.first_token_time = now;
    r.out.metrics.ttft = now - r.out.metrics.arrival_time;
  }
  // Detokenize; the stop string check sees the text as it grows.
  const std::optional<std::string> stop_str =
      r.stop->append(r.detok->push(static_cast<int32_t>(token)));
  if (stop_str) {
    finish(r, "stop", *stop_str);
    return true;
  }
  const bool min_reached = generated + 1 >= p.min_tokens;
  if (!p.ignore_eos && token == eos && min_reached) {
    finish(r, "stop", "");
    return true;
  }
  if (min_reached && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
                         p.stop_token_ids.end()) {
    finish(r, "stop", std::to_string(token));
    return true;
  }
  if (generated + 1 >= p.max_tokens ||
      static_cast<int64_t>(r.tokens.size()) >= config_.scheduler.max_model_len) {
    finish(r, "length", "");
    return true;
  }
  return false;
}

std::vector<EngineCore::Update> EngineCore::step() {
  std::vector<Update> updates;
  auto take_finished = [&](std::map<int64_t, Request>::iterator it) {
    updates.push_back(Update{it->first, std::move(it->second.out)});
    return requests_.erase(it);
  };
  // Rejected-at-arrival and aborted requests finish first, without running.
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& r = it->second;
    if (r.rejection) {
      fail(r, r.rejection->message());
      it = take_finished(it);
    } else if (r.aborted) {
      finish(r, "abort", "");
      it = take_finished(it);
    } else {
      ++it;
    }
  }
  if (requests_.empty()) return updates;

  std::vector<RequestView> views;
  views.reserve(requests_.size());
  for (const auto& [id, r] : requests_) {
    RequestView v;
    v.id = id;
    v.request_id = r.out.request_id;
    v.priority = r.spec.priority;
    v.arrival = id;
    v.num_prompt_tokens = r.num_prompt;
    v.max_tokens = r.spec.params.max_tokens;
    v.num_computed_tokens = r.num_computed;
    v.num_tokens = static_cast<int64_t>(r.tokens.size());
    v.status = r.status;
    views.push_back(v);
  }
  const ScheduleOutput plan = schedule(config_.scheduler, SchedulerInput{views}, cache_);
  ++totals_.steps;

  for (const Rejection& rej : plan.rejected) {
    auto it = requests_.find(rej.id);
    DI_CHECK(it != requests_.end(), "scheduler rejected unknown request {}", rej.id);
    fail(it->second, rej.status.message());
    take_finished(it);
  }
  for (SeqId id : plan.preempted) {
    Request& r = requests_.at(id);
    cache_.free(id);
    r.state.reset();
    r.num_computed = 0;
    r.status = RequestStatus::kPreempted;
    ++r.out.metrics.num_preemptions;
    ++totals_.preemptions;
    DI_LOG_DEBUG("request {} preempted (recompute); {} tokens to redo", r.out.request_id,
                 r.tokens.size());
  }
  if (plan.scheduled.empty()) return updates;

  // Commit the plan: cache pages, fresh states, the chunks of this step.
  const double now = seconds_since_start();
  std::vector<SequenceChunk> chunks;
  std::vector<Request*> batch;
  chunks.reserve(plan.scheduled.size());
  for (const ScheduledRequest& s : plan.scheduled) {
    Request& r = requests_.at(s.id);
    cache_.allocate(s.id, r.num_computed + s.num_new_tokens);
    if (!r.state) r.state = model_.new_sequence();
    if (r.status != RequestStatus::kRunning && r.out.metrics.first_scheduled_time == 0) {
      r.out.metrics.first_scheduled_time = now;
      r.out.metrics.time_in_queue = now - r.out.metrics.arrival_time;
    }
    r.status = RequestStatus::kRunning;
    SequenceChunk c;
    c.state = r.state.get();
    c.token_ids = std::span<const int64_t>(r.tokens.data() + r.num_computed,
                                           static_cast<size_t>(s.num_new_tokens));
    c.all_logits = r.spec.params.prompt_logprobs.has_value() && r.num_computed < r.num_prompt;
    chunks.push_back(c);
    batch.push_back(&r);
    totals_.computed_tokens += s.num_new_tokens;
  }
  // The sampling of the chunks that finish their sequence's known tokens (stable addresses:
  // reserved up front).
  std::vector<ChunkSampling> sampling;
  sampling.reserve(batch.size());
  if (config_.sample_in_backend) {
    for (size_t i = 0; i < batch.size(); ++i) {
      const Request& r = *batch[i];
      if (r.num_computed + static_cast<int64_t>(chunks[i].token_ids.size()) <
          static_cast<int64_t>(r.tokens.size())) {
        continue;  // prefill goes on
      }
      sampling.push_back(ChunkSampling{&r.spec.params, sampler_row(r)});
      chunks[i].sampling = &sampling.back();
    }
  }
  ForwardResult fr = model_.forward(chunks);

  for (size_t i = 0; i < batch.size(); ++i) {
    Request& r = *batch[i];
    const int64_t n = static_cast<int64_t>(chunks[i].token_ids.size());
    const int64_t start = r.num_computed;
    r.num_computed += n;
    if (chunks[i].all_logits) record_prompt_logprobs(r, start, n, fr.all_logits[i]);
    if (r.num_computed < static_cast<int64_t>(r.tokens.size())) continue;  // prefill goes on
    const bool done = i < fr.sampled.size() && fr.sampled[i]
                          ? append_sampled(r, *fr.sampled[i])
                          : append_sampled(r, sample_on_host(r, fr.logits[i]));
    if (done) {
      take_finished(requests_.find(r.id));
    } else if (r.spec.stream) {
      refresh_output(r, false);
      updates.push_back(Update{r.id, r.out});
    }
  }
  return updates;
}

}  // namespace di
