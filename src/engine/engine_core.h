#pragma once

// The engine core: requests, the step loop, and the hand-offs between scheduler, cache manager,
// forward pass, sampler and detokenizer (docs/design/engine.md). Single-threaded: only the
// thread calling step() touches engine state. The scheduler and the cache manager plan; this
// class commits their decisions.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "deepinfer/request_output.h"
#include "deepinfer/sampling_params.h"
#include "engine/stop_checker.h"
#include "kv_cache/kv_cache_manager.h"
#include "model/forward_api.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace di {

struct EngineCoreConfig {
  SchedulerConfig scheduler;
  KvCacheConfig cache;
  uint64_t seed = 0;  // per-request seeds of requests without one derive from it
  // Hand each sampled chunk's sampling to the forward (SequenceChunk::sampling), so that a
  // backend that can samples where the logits are (the CUDA backend: same token choices). False:
  // every row is sampled here from the returned logits.
  bool sample_in_backend = true;
};

// Turns a finished (or streaming) output text into reasoning / content / tool calls; set for
// chat requests. Returns false when the text could not be parsed (the raw text stays).
using OutputParser = std::function<void(deepinfer::CompletionOutput& out, bool finished)>;

struct NewRequest {
  std::string request_id;
  std::string prompt;  // for the output record; empty for token-id prompts
  std::vector<int64_t> prompt_token_ids;
  deepinfer::SamplingParams params;
  int32_t priority = 0;
  OutputParser parser;  // null for plain completions
  // Report the cumulative output after every step that produced a token (a streaming caller);
  // false: only the finished output, so the engine builds and copies it once, not per token.
  bool stream = false;
  // Set when the request was rejected before reaching the engine (bad JSON, unknown role, ...):
  // it finishes at the next step with this error and never runs.
  std::string error;
};

struct EngineTotals {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;     // of finished requests
  int64_t generated_tokens = 0;  // of finished requests
  int64_t computed_tokens = 0;   // every token through the forward (recomputation included)
  int64_t preemptions = 0;
  int64_t finished = 0;
  int64_t failed = 0;
};

class EngineCore {
 public:
  EngineCore(ForwardModel& model, const Tokenizer& tokenizer, const ModelConfig& model_config,
             const StateBytes& state_bytes, const EngineCoreConfig& config);

  // Queues a request; returns its engine id (arrival order). Invalid parameters do not throw:
  // the request finishes at the next step with `error` set.
  int64_t add_request(NewRequest request);
  // Finishes a request with reason "abort" at the next step and frees its memory.
  void abort(int64_t id);

  // One engine step. Returns the final RequestOutput of every request that finished during the
  // step, and the cumulative RequestOutput of every streaming request (NewRequest::stream) that
  // produced a token.
  struct Update {
    int64_t id = 0;  // the engine id add_request returned
    deepinfer::RequestOutput output;
  };
  std::vector<Update> step();

  bool has_unfinished() const { return !requests_.empty(); }
  size_t num_unfinished() const { return requests_.size(); }
  const KvCacheManager& cache() const { return cache_; }
  const EngineTotals& totals() const { return totals_; }
  double seconds_since_start() const;

 private:
  struct Request {
    int64_t id = 0;
    NewRequest spec;
    uint64_t seed = 0;
    std::vector<int64_t> tokens;  // prompt then generated
    int64_t num_prompt = 0;
    int64_t num_computed = 0;  // tokens in the sequence state
    RequestStatus status = RequestStatus::kWaiting;
    std::unique_ptr<SequenceState> state;
    std::unique_ptr<IncrementalDetokenizer> detok;
    std::unique_ptr<StopChecker> stop;
    deepinfer::RequestOutput out;
    bool aborted = false;
    std::optional<Status> rejection;
  };

  void finish(Request& r, std::string reason, std::string stop_reason);
  void fail(Request& r, const std::string& message);
  // The inputs of sampling r's next token, but the logits.
  SamplerRow sampler_row(const Request& r) const;
  // Samples the next token of `r` from the logits of its last position.
  SampleOutcome sample_on_host(const Request& r, const std::vector<double>& logits);
  // Appends the sampled token (or fails the request with the outcome's error); returns true when
  // the request is finished.
  bool append_sampled(Request& r, const SampleOutcome& s);
  void record_prompt_logprobs(Request& r, int64_t start, int64_t count,
                              const std::vector<double>& all_logits);
  void refresh_output(Request& r, bool finished);
  deepinfer::PositionLogprobs to_position_logprobs(const RowLogprobs& lp) const;

  ForwardModel& model_;
  const Tokenizer& tokenizer_;
  const ModelConfig& model_config_;
  EngineCoreConfig config_;
  KvCacheManager cache_;
  std::map<int64_t, Request> requests_;  // unfinished, by id (= arrival order)
  int64_t next_id_ = 0;
  EngineTotals totals_;
  std::chrono::steady_clock::time_point start_;
  std::vector<float> row_;  // fp32 logits of the row being sampled
  SamplerScratch scratch_;
};

}  // namespace di
