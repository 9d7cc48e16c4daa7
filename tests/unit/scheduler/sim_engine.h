#pragma once

#include <algorithm>
#include <map>
#include <vector>

#include "kv_cache/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace di::testing_sched {

// A minimal engine for the tests: keeps requests, calls schedule(), commits the output the way
// the engine contract says (free preempted, drop rejected, allocate scheduled), appends one
// sampled token per sampling request and finishes requests at max_tokens.
class SimEngine {
 public:
  struct Step {
    int64_t computed_before = 0;
    ScheduledRequest s;
  };

  SimEngine(const StateBytes& state, KvCacheConfig cache_cfg, SchedulerConfig cfg)
      : cache_(state, cache_cfg), cfg_(cfg) {}

  SeqId add(int64_t prompt, int64_t max_tokens, int32_t priority = 0) {
    RequestView r;
    r.id = next_id_++;
    r.arrival = r.id;
    r.priority = priority;
    r.num_prompt_tokens = prompt;
    r.max_tokens = max_tokens;
    r.num_tokens = prompt;
    reqs_[r.id] = r;
    return r.id;
  }

  // Running requests in the order they started, then the others by id.
  std::vector<RequestView> view() const {
    std::vector<RequestView> v;
    for (SeqId id : running_)
      v.push_back(reqs_.at(id));
    for (const auto& [id, r] : reqs_) {
      if (r.status != RequestStatus::kRunning) v.push_back(r);
    }
    return v;
  }

  ScheduleOutput step() {
    const std::vector<RequestView> v = view();
    ScheduleOutput out = schedule(cfg_, {v}, cache_);
    for (SeqId id : out.preempted) {
      cache_.free(id);
      RequestView& r = reqs_.at(id);
      r.num_computed_tokens = 0;
      r.status = RequestStatus::kPreempted;
      std::erase(running_, id);
      preemptions_.push_back(id);
    }
    for (const Rejection& rej : out.rejected) {
      rejected_[rej.id] = rej.status;
      reqs_.erase(rej.id);
    }
    for (const ScheduledRequest& s : out.scheduled) {
      RequestView& r = reqs_.at(s.id);
      history_[s.id].push_back({r.num_computed_tokens, s});
      cache_.allocate(s.id, r.num_computed_tokens + s.num_new_tokens);
      r.num_computed_tokens += s.num_new_tokens;
      if (r.status != RequestStatus::kRunning) {
        r.status = RequestStatus::kRunning;
        running_.push_back(s.id);
      }
      if (!s.samples_token) continue;
      ++r.num_tokens;
      if (r.num_tokens - r.num_prompt_tokens >= r.max_tokens) {
        cache_.free(s.id);
        std::erase(running_, s.id);
        finished_[s.id] = r;
        reqs_.erase(s.id);
      }
    }
    return out;
  }

  const KvCacheManager& cache() const { return cache_; }
  const SchedulerConfig& config() const { return cfg_; }
  const RequestView& request(SeqId id) const { return reqs_.at(id); }
  const std::vector<SeqId>& running() const { return running_; }
  bool idle() const { return reqs_.empty(); }
  const std::map<SeqId, RequestView>& finished() const { return finished_; }
  const std::map<SeqId, Status>& rejected() const { return rejected_; }
  const std::vector<SeqId>& preemptions() const { return preemptions_; }
  const std::vector<Step>& history(SeqId id) const { return history_.at(id); }

 private:
  KvCacheManager cache_;
  SchedulerConfig cfg_;
  std::map<SeqId, RequestView> reqs_;
  std::vector<SeqId> running_;
  std::map<SeqId, RequestView> finished_;
  std::map<SeqId, Status> rejected_;
  std::vector<SeqId> preemptions_;
  std::map<SeqId, std::vector<Step>> history_;
  SeqId next_id_ = 0;
};

}  // namespace di::testing_sched
