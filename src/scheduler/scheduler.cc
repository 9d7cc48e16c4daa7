#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "common/check.h"
#include "kv_cache/kv_cache_planner.h"
#include "model/model_stats.h"

namespace di {

void validate_scheduler_config(const SchedulerConfig& cfg) {
  DI_CHECK(cfg.max_num_seqs >= 1, "scheduler max_num_seqs must be >= 1, got {}", cfg.max_num_seqs);
  DI_CHECK(cfg.max_num_batched_tokens >= 1, "scheduler max_num_batched_tokens must be >= 1, got {}",
           cfg.max_num_batched_tokens);
  DI_CHECK(cfg.max_model_len >= 1, "scheduler max_model_len must be >= 1, got {}",
           cfg.max_model_len);
  DI_CHECK(cfg.long_prefill_token_threshold >= 0,
           "scheduler long_prefill_token_threshold must be >= 0, got {}",
           cfg.long_prefill_token_threshold);
  // Without chunking a (re)computed request runs whole in one step.
  DI_CHECK(cfg.enable_chunked_prefill || cfg.max_num_batched_tokens >= cfg.max_model_len,
           "scheduler without chunked prefill needs max_num_batched_tokens ({}) >= "
           "max_model_len ({})",
           cfg.max_num_batched_tokens, cfg.max_model_len);
}

namespace {

// A rejection naming the request by the caller's id (the scheduler's id when there is none).
Status rejection(StatusCode code, const RequestView& req, const std::string& why) {
  if (req.request_id.empty()) return Status(code, fmt::format("request {}: {}", req.id, why));
  return Status(code, fmt::format("request {}: {}", req.request_id, why));
}

}  // namespace

std::optional<Status> check_admission(const SchedulerConfig& cfg, const RequestView& req,
                                      const KvCacheManager& cache) {
  if (req.num_prompt_tokens < 1) {
    return rejection(StatusCode::kInvalidArgument, req, "empty prompt");
  }
  if (req.num_prompt_tokens > cfg.max_model_len) {
    return rejection(StatusCode::kInvalidArgument, req,
                     fmt::format("prompt of {} tokens is longer than max_model_len {}",
                                 req.num_prompt_tokens, cfg.max_model_len));
  }
  if (req.max_tokens < 0 || req.num_prompt_tokens + req.max_tokens > cfg.max_model_len) {
    return rejection(StatusCode::kInvalidArgument, req,
                     fmt::format("prompt of {} tokens + max_tokens {} exceeds max_model_len {}",
                                 req.num_prompt_tokens, req.max_tokens, cfg.max_model_len));
  }
  const int64_t longest = req.num_prompt_tokens + req.max_tokens;
  if (!cfg.enable_chunked_prefill && longest > cfg.max_num_batched_tokens) {
    return rejection(
        StatusCode::kInvalidArgument, req,
        fmt::format("prompt of {} tokens + max_tokens {} exceeds "
                    "max_num_batched_tokens {} and chunked prefill is off",
                    req.num_prompt_tokens, req.max_tokens, cfg.max_num_batched_tokens));
  }
  const int64_t pages = cache.pages_for_tokens(longest);
  if (pages > cache.total_pages()) {
    const auto page_bytes = static_cast<uint64_t>(cache.page_bytes());
    return rejection(
        StatusCode::kResourceExhausted, req,
        fmt::format("the state of {} tokens (prompt {} + max_tokens {}) needs {} pages ({}) but "
                    "the whole kv cache has {} pages ({}); at most {} tokens fit",
                    longest, req.num_prompt_tokens, req.max_tokens, pages,
                    format_bytes(static_cast<uint64_t>(pages) * page_bytes), cache.total_pages(),
                    format_bytes(static_cast<uint64_t>(cache.total_pages()) * page_bytes),
                    cache.max_tokens_that_fit_alone()));
  }
  return std::nullopt;
}

namespace {

auto order_key(const RequestView& r) {
  return std::make_tuple(r.priority, r.arrival, r.id);
}

// Tokens a request may compute this step before cache limits.
int64_t tokens_wanted(const SchedulerConfig& cfg, const RequestView& r, int64_t budget) {
  int64_t n = r.num_tokens - r.num_computed_tokens;
  if (cfg.enable_chunked_prefill && cfg.long_prefill_token_threshold > 0)
    n = std::min(n, cfg.long_prefill_token_threshold);
  n = std::min(n, cfg.max_model_len - r.num_computed_tokens);
  return std::min(n, budget);
}

ScheduledRequest make_scheduled(const RequestView& r, int64_t n) {
  ScheduledRequest s;
  s.id = r.id;
  s.num_new_tokens = n;
  s.is_prefill_chunk = r.num_computed_tokens < r.num_tokens - 1;
  s.samples_token = r.num_computed_tokens + n == r.num_tokens;
  return s;
}

}  // namespace

ScheduleOutput schedule(const SchedulerConfig& cfg, const SchedulerInput& input,
                        const KvCacheManager& cache) {
  ScheduleOutput out;
  KvCachePlanner plan(cache);
  int64_t budget = cfg.max_num_batched_tokens;

  std::vector<const RequestView*> running;
  std::vector<const RequestView*> waiting;
  running.reserve(input.requests.size());
  for (const RequestView& r : input.requests) {
    DI_CHECK(r.num_computed_tokens >= 0 && r.num_computed_tokens <= r.num_tokens,
             "request {}: num_computed_tokens {} outside [0, num_tokens {}]", r.id,
             r.num_computed_tokens, r.num_tokens);
    (r.status == RequestStatus::kRunning ? running : waiting).push_back(&r);
  }

  // 1. Running requests, in order. tokens[i] > 0: scheduled; preempted[i]: preempted.
  std::vector<int64_t> tokens(running.size(), 0);
  std::vector<uint8_t> preempted(running.size(), 0);
  int64_t num_running = static_cast<int64_t>(running.size());
  for (size_t i = 0; i < running.size(); ++i) {
    if (preempted[i]) continue;
    const RequestView& r = *running[i];
    const int64_t n = tokens_wanted(cfg, r, budget);
    if (n <= 0) continue;
    bool self_preempted = false;
    while (!plan.try_reserve(r.id, r.num_computed_tokens + n)) {
      // Preemption by recompute: the lowest-priority, latest-arrived running request (possibly
      // one already scheduled this step, possibly this one) gives back all its pages.
      size_t victim = running.size();
      for (size_t j = 0; j < running.size(); ++j) {
        if (preempted[j]) continue;
        if (victim == running.size() || order_key(*running[j]) > order_key(*running[victim]))
          victim = j;
      }
      plan.release(running[victim]->id);
      preempted[victim] = 1;
      --num_running;
      out.preempted.push_back(running[victim]->id);
      budget += tokens[victim];
      tokens[victim] = 0;
      if (victim == i) {
        self_preempted = true;
        break;
      }
    }
    // As vLLM: once a running request cannot be served, later ones are not tried this step.
    if (self_preempted) break;
    tokens[i] = n;
    budget -= n;
  }
  for (size_t i = 0; i < running.size(); ++i) {
    if (tokens[i] > 0) out.scheduled.push_back(make_scheduled(*running[i], tokens[i]));
  }

  // 2. Waiting requests, FCFS by (priority, arrival): the first that does not fit blocks the
  // ones behind it. Nothing is admitted in a step that preempted (memory is short).
  std::sort(waiting.begin(), waiting.end(), [](const RequestView* a, const RequestView* b) {
    return order_key(*a) < order_key(*b);
  });
  bool admitting = out.preempted.empty();
  for (const RequestView* w : waiting) {
    if (std::optional<Status> why = check_admission(cfg, *w, cache)) {
      out.rejected.push_back({w->id, std::move(*why)});
      continue;
    }
    if (!admitting) continue;
    if (num_running >= cfg.max_num_seqs || budget <= 0) {
      admitting = false;
      continue;
    }
    const int64_t whole = w->num_tokens - w->num_computed_tokens;
    const int64_t n = tokens_wanted(cfg, *w, budget);
    if (n <= 0 || (!cfg.enable_chunked_prefill && n < whole) ||
        !plan.try_reserve(w->id, w->num_computed_tokens + n)) {
      admitting = false;
      continue;
    }
    out.scheduled.push_back(make_scheduled(*w, n));
    budget -= n;
    ++num_running;
  }

  for (const ScheduledRequest& s : out.scheduled)
    out.total_num_scheduled_tokens += s.num_new_tokens;
  return out;
}

}  // namespace di
