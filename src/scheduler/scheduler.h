#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kv_cache/kv_cache_manager.h"

namespace di {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;                // running requests after this step, at most
  int64_t max_num_batched_tokens = 8192;     // tokens computed in one step, all requests
  int64_t max_model_len = 65536;             // prompt + generated tokens of one request, at most
  bool enable_chunked_prefill = true;        // false: a waiting prompt runs whole or waits
  int64_t long_prefill_token_threshold = 0;  // > 0: cap on one request's tokens per step
};
// Throws di::Error on non-positive limits, or on max_num_batched_tokens < max_model_len
// without chunked prefill (a recompute could never be scheduled).
void validate_scheduler_config(const SchedulerConfig& cfg);

enum class RequestStatus : uint8_t {
  kWaiting,    // not started yet; holds no cache pages
  kRunning,    // holds cache pages; continues where it stopped
  kPreempted,  // preempted by recompute: no pages, num_computed_tokens 0, waits to resume
};

// The engine's request, as the scheduler sees it (read-only).
struct RequestView {
  SeqId id = 0;
  // The caller's id of the request (RequestOutput::request_id), which rejection messages name;
  // empty: they name `id`. The viewed string must outlive the schedule() call.
  std::string_view request_id;
  int32_t priority = 0;  // lower value runs earlier (vLLM)
  int64_t arrival = 0;   // arrival order (monotonic per engine); ties broken by id
  int64_t num_prompt_tokens = 0;
  int64_t max_tokens = 0;           // most tokens to generate (the engine resolves its default)
  int64_t num_computed_tokens = 0;  // tokens already in the state (== cache num_tokens)
  int64_t num_tokens = 0;           // prompt + generated tokens known so far
  RequestStatus status = RequestStatus::kWaiting;
};

struct SchedulerInput {
  // Running requests are served in the order they appear here (the engine keeps them in the
  // order they started running); waiting/preempted ones in (priority, arrival, id) order.
  std::span<const RequestView> requests;
};

struct ScheduledRequest {
  SeqId id = 0;
  int64_t num_new_tokens = 0;  // tokens computed this step: [num_computed, num_computed + new)
  // Tokens of the prompt (or of a recompute after preemption) rather than one decode token:
  // num_computed_tokens < num_tokens - 1 before this step.
  bool is_prefill_chunk = false;
  // The step reaches the last known token, so its logits are sampled; false for a chunk that
  // leaves part of the prefill for later steps.
  bool samples_token = false;
};

struct Rejection {
  SeqId id = 0;
  Status status;  // kInvalidArgument (length limits) or kResourceExhausted (cache budget)
};

struct ScheduleOutput {
  std::vector<ScheduledRequest> scheduled;  // running ones first (input order), then admitted
  std::vector<SeqId> preempted;             // running -> preempted, in preemption order
  std::vector<Rejection> rejected;          // waiting requests that can never run
  int64_t total_num_scheduled_tokens = 0;
};

// Why a request can never run, or nullopt: empty prompt, prompt longer than max_model_len,
// prompt + max_tokens over max_model_len (or over max_num_batched_tokens without chunked
// prefill), or state for prompt + max_tokens tokens larger than the whole cache. The message
// starts "request <request_id>: ".
std::optional<Status> check_admission(const SchedulerConfig& cfg, const RequestView& req,
                                      const KvCacheManager& cache);

// One engine step's decisions (vLLM v1 policy; docs/design/kv_cache_and_scheduler.md). Pure:
// reads its inputs, mutates nothing. The engine commits the output in this order: free the
// preempted requests' pages and reset them, drop the rejected ones, then cache.allocate(id,
// num_computed + num_new_tokens) for each scheduled request in order (never throws then).
ScheduleOutput schedule(const SchedulerConfig& cfg, const SchedulerInput& input,
                        const KvCacheManager& cache);

}  // namespace di
