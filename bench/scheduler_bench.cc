// scheduler_bench: one engine step of the scheduler on the real V4.1-Flash state layout:
// schedule() + the commit (free preempted, allocate every scheduled request) + the request
// bookkeeping a minimal engine does. Cases: 256 running decode requests; a mixed batch of
// decodes and chunked prefills with requests finishing and arriving. Results: docs/PERF.md.

#include <benchmark/benchmark.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "config/model_config.h"
#include "kv_cache/kv_cache_manager.h"
#include "model/layer_plan.h"
#include "model/model_stats.h"
#include "scheduler/scheduler.h"

namespace {

using di::RequestStatus;
using di::RequestView;

di::StateBytes flash_state() {
  const di::ModelConfig cfg =
      di::load_model_config_file(std::string(DI_SOURCE_DIR) + "/configs/v41-flash.json");
  return di::compute_state_bytes(cfg, di::build_layer_plan(cfg));
}

// A minimal engine: requests in slots; a finished request's slot takes a new waiting request.
class MiniEngine {
 public:
  // recycle_running: a finished request is replaced by a running one with the same context
  // (steady-state decode); otherwise by a waiting prompt of the same length.
  MiniEngine(const di::StateBytes& state, uint64_t budget, di::SchedulerConfig cfg,
             bool recycle_running)
      : cache_(state, {budget, 64 * 1024}), cfg_(cfg), recycle_running_(recycle_running) {}

  // Adds a request already holding `context` tokens of state (running, decoding).
  void add_running(int64_t context, int64_t max_tokens) {
    RequestView r = fresh(context, max_tokens);
    r.num_tokens = context + 1;
    r.num_computed_tokens = context;
    r.status = RequestStatus::kRunning;
    cache_.allocate(r.id, context);
    push(r);
  }
  void add_waiting(int64_t prompt, int64_t max_tokens) { push(fresh(prompt, max_tokens)); }

  // One step; returns the tokens scheduled.
  int64_t step() {
    const di::ScheduleOutput out = di::schedule(cfg_, {reqs_}, cache_);
    for (di::SeqId id : out.preempted) {
      cache_.free(id);
      RequestView& r = at(id);
      r.num_computed_tokens = 0;
      r.status = RequestStatus::kPreempted;
    }
    for (const di::ScheduledRequest& s : out.scheduled) {
      RequestView& r = at(s.id);
      cache_.allocate(s.id, r.num_computed_tokens + s.num_new_tokens);
      r.num_computed_tokens += s.num_new_tokens;
      r.status = RequestStatus::kRunning;
      if (!s.samples_token) continue;
      ++r.num_tokens;  // the sampled token
      if (r.num_tokens - r.num_prompt_tokens >= r.max_tokens) {
        // Finished: the slot takes a new request with the same shape.
        cache_.free(r.id);
        slot_.erase(r.id);
        RequestView next = fresh(r.num_prompt_tokens, r.max_tokens);
        if (recycle_running_) {
          next.num_computed_tokens = next.num_prompt_tokens;
          next.num_tokens = next.num_prompt_tokens + 1;
          next.status = RequestStatus::kRunning;
          cache_.allocate(next.id, next.num_computed_tokens);
        }
        r = next;
        slot_[r.id] = index_of_last_;
      }
    }
    return out.total_num_scheduled_tokens;
  }

  const di::KvCacheManager& cache() const { return cache_; }

 private:
  RequestView fresh(int64_t prompt, int64_t max_tokens) {
    RequestView r;
    r.id = next_id_++;
    r.arrival = r.id;
    r.num_prompt_tokens = prompt;
    r.max_tokens = max_tokens;
    r.num_tokens = prompt;
    return r;
  }
  void push(const RequestView& r) {
    slot_[r.id] = reqs_.size();
    reqs_.push_back(r);
  }
  RequestView& at(di::SeqId id) {
    index_of_last_ = slot_.at(id);
    return reqs_[index_of_last_];
  }

  di::KvCacheManager cache_;
  di::SchedulerConfig cfg_;
  bool recycle_running_ = false;
  std::vector<RequestView> reqs_;
  std::unordered_map<di::SeqId, size_t> slot_;
  size_t index_of_last_ = 0;
  di::SeqId next_id_ = 0;
};

constexpr uint64_t kBudget = 40ull << 30;  // state budget of one H200 after the weights

di::SchedulerConfig bench_config() {
  di::SchedulerConfig cfg;
  cfg.max_num_seqs = 256;
  cfg.max_num_batched_tokens = 8192;
  cfg.max_model_len = 65536;
  return cfg;
}

// 256 running requests decoding one token each; contexts staggered 2k..10k so that page
// boundaries are crossed at different steps; each finishes after 1k..9k generated tokens and is
// replaced by another running request.
void BM_Decode256(benchmark::State& state) {
  MiniEngine eng(flash_state(), kBudget, bench_config(), /*recycle_running=*/true);
  for (int i = 0; i < 256; ++i)
    eng.add_running(2048 + 31 * i, 1024 + 32 * i);
  int64_t tokens = 0;
  for (auto _ : state)
    tokens += eng.step();
  state.counters["tokens/step"] =
      static_cast<double>(tokens) / static_cast<double>(state.iterations());
  state.counters["cache_usage"] = eng.cache().usage();
}
BENCHMARK(BM_Decode256)->Unit(benchmark::kMicrosecond);

// 224 decoding requests with 1k..4.8k contexts (each finishes after 64..287 tokens and a new
// prompt of the same length arrives in its slot) + 32 waiting 3,000-token prompts: steps mix
// decodes with chunked prefills under the 8k-token budget.
void BM_Mixed(benchmark::State& state) {
  MiniEngine eng(flash_state(), kBudget, bench_config(), /*recycle_running=*/false);
  for (int i = 0; i < 224; ++i)
    eng.add_running(1024 + 17 * i, 64 + i);
  for (int i = 0; i < 32; ++i)
    eng.add_waiting(3000, 128);
  int64_t tokens = 0;
  for (auto _ : state)
    tokens += eng.step();
  state.counters["tokens/step"] =
      static_cast<double>(tokens) / static_cast<double>(state.iterations());
  state.counters["cache_usage"] = eng.cache().usage();
}
BENCHMARK(BM_Mixed)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
