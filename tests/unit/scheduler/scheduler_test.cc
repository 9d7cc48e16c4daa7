#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "unit/kv_cache/test_states.h"
#include "unit/scheduler/sim_engine.h"

namespace di {
namespace {

using testing_sched::SimEngine;
using testing_states::state_of;

constexpr int64_t kPage = 512;  // small pages: fine-grained memory pressure on the micro model

const StateBytes& micro() {
  static const StateBytes s = state_of("tests/data/v41-micro.json");
  return s;
}

KvCacheConfig pages(int64_t n) {
  return {static_cast<uint64_t>(n * kPage), kPage};
}
KvCacheConfig roomy() {
  return pages(1 << 20);
}
int64_t pages_for(int64_t tokens) {
  return KvCacheManager(micro(), pages(0)).pages_for_tokens(tokens);
}

SchedulerConfig sched(int64_t max_seqs, int64_t budget) {
  SchedulerConfig c;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget;
  c.max_model_len = 4096;
  return c;
}

// Steps until idle; checks the per-step limits. Returns the number of steps.
int run_to_completion(SimEngine& e, int max_steps = 100000) {
  int steps = 0;
  while (!e.idle()) {
    const ScheduleOutput out = e.step();
    int64_t sum = 0;
    for (const ScheduledRequest& s : out.scheduled) {
      EXPECT_GT(s.num_new_tokens, 0);
      sum += s.num_new_tokens;
    }
    EXPECT_EQ(sum, out.total_num_scheduled_tokens);
    EXPECT_LE(sum, e.config().max_num_batched_tokens);
    EXPECT_LE(static_cast<int64_t>(e.running().size()), e.config().max_num_seqs);
    for (SeqId id : e.running())
      EXPECT_EQ(e.cache().num_tokens(id), e.request(id).num_computed_tokens);
    if (++steps > max_steps) {
      ADD_FAILURE() << "no progress after " << max_steps << " steps";
      break;
    }
  }
  EXPECT_EQ(e.cache().used_pages(), 0);
  return steps;
}

TEST(Scheduler, ChunkedPrefillSplitsAThousandTokenPrompt) {
  SimEngine e(micro(), roomy(), sched(8, 64));
  const SeqId id = e.add(1000, 3);
  run_to_completion(e);
  const auto& h = e.history(id);
  ASSERT_EQ(h.size(), 16u + 2u);  // 15 x 64 + 40, then 2 decode steps
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(h[i].computed_before, static_cast<int64_t>(i) * 64);
    EXPECT_EQ(h[i].s.num_new_tokens, i < 15 ? 64 : 40);
    EXPECT_TRUE(h[i].s.is_prefill_chunk);
    EXPECT_EQ(h[i].s.samples_token, i == 15);
  }
  for (size_t i = 16; i < 18; ++i) {
    EXPECT_EQ(h[i].s.num_new_tokens, 1);
    EXPECT_FALSE(h[i].s.is_prefill_chunk);
    EXPECT_TRUE(h[i].s.samples_token);
  }
  EXPECT_EQ(e.finished().at(id).num_tokens, 1003);
}

TEST(Scheduler, TokenBudgetAndMaxNumSeqsRespected) {
  SimEngine e(micro(), roomy(), sched(4, 100));
  std::vector<SeqId> ids;
  for (int i = 0; i < 20; ++i)
    ids.push_back(e.add(10 + 37 * i % 300, 1 + i % 7));
  run_to_completion(e);
  EXPECT_EQ(e.finished().size(), ids.size());
  for (SeqId id : ids) {
    const RequestView& r = e.finished().at(id);
    EXPECT_EQ(r.num_tokens - r.num_prompt_tokens, r.max_tokens);
  }
  EXPECT_TRUE(e.preemptions().empty());
}

TEST(Scheduler, DecodesBeforeNewPrefills) {
  SimEngine e(micro(), roomy(), sched(8, 64));
  const SeqId a = e.add(10, 50);
  const SeqId b = e.add(20, 50);
  e.step();  // both prefills (30 tokens)
  const SeqId c = e.add(500, 5);
  const ScheduleOutput out = e.step();
  ASSERT_EQ(out.scheduled.size(), 3u);
  EXPECT_EQ(out.scheduled[0].id, a);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 1);
  EXPECT_EQ(out.scheduled[1].id, b);
  EXPECT_EQ(out.scheduled[1].num_new_tokens, 1);
  EXPECT_EQ(out.scheduled[2].id, c);
  EXPECT_EQ(out.scheduled[2].num_new_tokens, 62);
  EXPECT_TRUE(out.scheduled[2].is_prefill_chunk);
  EXPECT_FALSE(out.scheduled[2].samples_token);
  EXPECT_EQ(out.total_num_scheduled_tokens, 64);
}

RequestView waiting(SeqId id, int64_t arrival, int64_t prompt, int32_t priority = 0) {
  RequestView r;
  r.id = id;
  r.arrival = arrival;
  r.priority = priority;
  r.num_prompt_tokens = prompt;
  r.num_tokens = prompt;
  r.max_tokens = 10;
  return r;
}

std::vector<SeqId> scheduled_ids(const ScheduleOutput& out) {
  std::vector<SeqId> ids;
  for (const ScheduledRequest& s : out.scheduled)
    ids.push_back(s.id);
  return ids;
}

TEST(Scheduler, WaitingRequestsRunFirstComeFirstServed) {
  KvCacheManager cache(micro(), roomy());
  const std::vector<RequestView> reqs = {waiting(7, 3, 10), waiting(8, 1, 10), waiting(9, 2, 10)};
  const ScheduleOutput out = schedule(sched(2, 1000), {reqs}, cache);
  EXPECT_EQ(scheduled_ids(out), (std::vector<SeqId>{8, 9}));  // max_num_seqs 2
}

TEST(Scheduler, PriorityBeforeArrival) {
  KvCacheManager cache(micro(), roomy());
  const std::vector<RequestView> reqs = {waiting(1, 0, 10, 5), waiting(2, 1, 10, 0),
                                         waiting(3, 2, 10, -1)};
  const ScheduleOutput out = schedule(sched(8, 1000), {reqs}, cache);
  EXPECT_EQ(scheduled_ids(out), (std::vector<SeqId>{3, 2, 1}));
}

TEST(Scheduler, AWaitingRequestThatDoesNotFitBlocksTheOnesBehind) {
  // Room for one 100-token sequence + a bit: a 200-token head does not fit now (it would
  // alone), a 10-token request behind it would, but FCFS does not skip.
  const int64_t total = pages_for(100) + pages_for(10) + 2;
  KvCacheManager cache(micro(), pages(total));
  cache.allocate(1, 100);
  RequestView run = waiting(1, 0, 100);
  run.status = RequestStatus::kRunning;
  run.num_tokens = 101;
  run.num_computed_tokens = 100;
  ASSERT_LE(pages_for(210), total);  // fits alone, so it is not rejected
  ASSERT_GT(pages_for(200), cache.free_pages());
  const std::vector<RequestView> reqs = {run, waiting(2, 1, 200), waiting(3, 2, 10)};
  const ScheduleOutput out = schedule(sched(8, 4096), {reqs}, cache);
  EXPECT_EQ(scheduled_ids(out), (std::vector<SeqId>{1}));
  EXPECT_TRUE(out.rejected.empty());
  // Without the head, the small one runs.
  const std::vector<RequestView> reqs2 = {run, waiting(3, 2, 10)};
  EXPECT_EQ(scheduled_ids(schedule(sched(8, 4096), {reqs2}, cache)), (std::vector<SeqId>{1, 3}));
}

TEST(Scheduler, ChunkedPrefillOffWaitsForRoomForTheWholePrompt) {
  KvCacheManager cache(micro(), roomy());
  SchedulerConfig c = sched(8, 64);
  c.enable_chunked_prefill = false;
  const std::vector<RequestView> reqs = {waiting(1, 0, 50), waiting(2, 1, 20), waiting(3, 2, 5)};
  const ScheduleOutput out = schedule(c, {reqs}, cache);
  EXPECT_EQ(out.rejected.size(), 0u);
  EXPECT_EQ(scheduled_ids(out), (std::vector<SeqId>{1}));  // 2 does not fit in 14, 3 waits
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 50);
  EXPECT_TRUE(out.scheduled[0].samples_token);
  // A request that could never run whole is rejected rather than left waiting forever.
  const std::vector<RequestView> big = {waiting(4, 3, 60)};  // 60 + max_tokens 10 > 64
  const ScheduleOutput r = schedule(c, {big}, cache);
  ASSERT_EQ(r.rejected.size(), 1u);
  EXPECT_NE(r.rejected[0].status.message().find("chunked prefill is off"), std::string::npos);
  EXPECT_THROW(validate_scheduler_config(c), Error);  // 64 < max_model_len 4096
}

TEST(Scheduler, LongPrefillThresholdCapsOneRequest) {
  KvCacheManager cache(micro(), roomy());
  SchedulerConfig c = sched(8, 64);
  c.long_prefill_token_threshold = 16;
  const std::vector<RequestView> reqs = {waiting(1, 0, 50), waiting(2, 1, 20), waiting(3, 2, 5)};
  const ScheduleOutput out = schedule(c, {reqs}, cache);
  ASSERT_EQ(out.scheduled.size(), 3u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 16);
  EXPECT_EQ(out.scheduled[1].num_new_tokens, 16);
  EXPECT_EQ(out.scheduled[2].num_new_tokens, 5);
  EXPECT_EQ(out.total_num_scheduled_tokens, 37);
}

TEST(Scheduler, PreemptsTheLatestArrivalWhichLaterResumesFromZero) {
  // Two requests that cannot both reach their final length.
  SimEngine e(micro(), pages(2 * pages_for(150)), sched(8, 256));
  const SeqId a = e.add(40, 200);
  const SeqId b = e.add(40, 200);
  run_to_completion(e);
  ASSERT_FALSE(e.preemptions().empty());
  EXPECT_EQ(e.preemptions().front(), b);
  ASSERT_EQ(e.finished().size(), 2u);
  EXPECT_EQ(e.finished().at(a).num_tokens, 240);
  EXPECT_EQ(e.finished().at(b).num_tokens, 240);  // generated tokens survive preemption
  // b's history: after its preemption it restarts at 0 computed tokens and recomputes prompt +
  // the tokens generated so far in one chunk (the budget allows), then decodes on.
  const auto& h = e.history(b);
  size_t restart = 0;
  for (size_t i = 1; i < h.size(); ++i) {
    if (h[i].computed_before == 0) {
      restart = i;
      break;
    }
  }
  ASSERT_GT(restart, 0u);
  const auto& last = h[restart - 1];
  const int64_t tokens_before =
      last.computed_before + last.s.num_new_tokens + (last.s.samples_token ? 1 : 0);
  EXPECT_GT(tokens_before, 40);
  EXPECT_EQ(h[restart].s.num_new_tokens, tokens_before);
  EXPECT_TRUE(h[restart].s.is_prefill_chunk);
  EXPECT_TRUE(h[restart].s.samples_token);
  // a was never preempted.
  for (size_t i = 1; i < e.history(a).size(); ++i)
    EXPECT_GT(e.history(a)[i].computed_before, 0);
}

TEST(Scheduler, PreemptsTheLowestPriorityEvenIfItArrivedFirst) {
  SimEngine e(micro(), pages(2 * pages_for(150)), sched(8, 256));
  const SeqId a = e.add(40, 200, /*priority=*/1);
  const SeqId b = e.add(40, 200, /*priority=*/0);
  run_to_completion(e);
  ASSERT_FALSE(e.preemptions().empty());
  EXPECT_EQ(e.preemptions().front(), a);
  EXPECT_EQ(e.finished().size(), 2u);
  (void)b;
}

RequestView running(SeqId id, int64_t arrival, int64_t computed, int32_t priority = 0) {
  RequestView r = waiting(id, arrival, computed, priority);
  r.num_tokens = computed + 1;
  r.num_computed_tokens = computed;
  r.status = RequestStatus::kRunning;
  return r;
}

// Smallest length above `from` whose state needs one page more.
int64_t next_page_boundary(int64_t from) {
  int64_t n = from + 1;
  while (pages_for(n) == pages_for(from))
    ++n;
  return n;
}

TEST(Scheduler, AVictimAlreadyScheduledThisStepGivesBackItsTokens) {
  // x (priority 5) is served first, then y (priority 0) needs a new page and none is free: the
  // victim is x, already scheduled; it is unscheduled and preempted, y runs.
  const int64_t y_len = next_page_boundary(300) - 1;  // y's next token needs a page more
  const int64_t total = pages_for(100) + pages_for(y_len);
  KvCacheManager cache(micro(), pages(total));
  cache.allocate(10, 100);
  cache.allocate(11, y_len);
  ASSERT_EQ(cache.free_pages(), 0);
  ASSERT_EQ(cache.pages_needed(10, 101), 0);
  const std::vector<RequestView> reqs = {running(10, 0, 100, 5), running(11, 1, y_len, 0)};
  const ScheduleOutput out = schedule(sched(8, 64), {reqs}, cache);
  EXPECT_EQ(scheduled_ids(out), (std::vector<SeqId>{11}));
  EXPECT_EQ(out.preempted, (std::vector<SeqId>{10}));
  EXPECT_EQ(out.total_num_scheduled_tokens, 1);
}

TEST(Scheduler, NothingIsAdmittedInAStepThatPreempts) {
  const int64_t y_len = next_page_boundary(300) - 1;
  const int64_t total = pages_for(100) + pages_for(y_len);
  KvCacheManager cache(micro(), pages(total));
  cache.allocate(10, 100);
  cache.allocate(11, y_len);
  const std::vector<RequestView> reqs = {running(10, 0, 100), running(11, 1, y_len),
                                         waiting(12, 2, 5)};
  const ScheduleOutput out = schedule(sched(8, 64), {reqs}, cache);
  // 11 (latest arrival) cannot grow and is its own victim; 12 must wait.
  EXPECT_EQ(scheduled_ids(out), (std::vector<SeqId>{10}));
  EXPECT_EQ(out.preempted, (std::vector<SeqId>{11}));
}

TEST(Scheduler, AdmissionRejections) {
  KvCacheManager cache(micro(), pages(pages_for(1000)));
  SchedulerConfig c = sched(8, 64);
  c.max_model_len = 2048;
  RequestView too_long = waiting(1, 0, 3000);
  too_long.request_id = "custom-long";  // messages name the caller's id when there is one
  RequestView too_many = waiting(2, 1, 2000);
  too_many.max_tokens = 100;
  RequestView no_room = waiting(3, 2, 1000);
  no_room.max_tokens = 500;
  RequestView empty = waiting(4, 3, 0);
  RequestView ok = waiting(5, 4, 10);
  const std::vector<RequestView> reqs = {too_long, too_many, no_room, empty, ok};
  const ScheduleOutput out = schedule(c, {reqs}, cache);
  EXPECT_EQ(scheduled_ids(out), (std::vector<SeqId>{5}));  // rejections do not block
  ASSERT_EQ(out.rejected.size(), 4u);
  auto msg = [&](size_t i) { return out.rejected[i].status.message(); };
  EXPECT_EQ(out.rejected[0].id, 1);
  EXPECT_EQ(out.rejected[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(msg(0), "request custom-long: prompt of 3000 tokens is longer than max_model_len 2048");
  EXPECT_EQ(out.rejected[1].id, 2);
  EXPECT_EQ(msg(1), "request 2: prompt of 2000 tokens + max_tokens 100 exceeds max_model_len 2048");
  EXPECT_EQ(out.rejected[2].id, 3);
  EXPECT_EQ(out.rejected[2].status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(msg(2).rfind("request 3: the state of 1500 tokens", 0), 0u) << msg(2);
  EXPECT_NE(msg(2).find("whole kv cache"), std::string::npos) << msg(2);
  EXPECT_NE(msg(2).find(fmt::format("at most {} tokens fit", cache.max_tokens_that_fit_alone())),
            std::string::npos)
      << msg(2);
  EXPECT_EQ(out.rejected[3].id, 4);
  EXPECT_EQ(msg(3), "request 4: empty prompt");
  EXPECT_FALSE(check_admission(c, ok, cache).has_value());
}

TEST(Scheduler, PureAndDeterministic) {
  const int64_t total = pages_for(300) * 3;
  KvCacheManager cache(micro(), pages(total));
  cache.allocate(1, 200);
  cache.allocate(2, 250);
  const std::vector<RequestView> reqs = {running(1, 0, 200), running(2, 1, 250),
                                         waiting(5, 4, 700, 1), waiting(3, 2, 90),
                                         waiting(4, 3, 900)};
  const std::vector<RequestView> copy = reqs;
  const int64_t used = cache.used_pages();
  const ScheduleOutput a = schedule(sched(8, 512), {reqs}, cache);
  const ScheduleOutput b = schedule(sched(8, 512), {reqs}, cache);
  // Waiting requests given in another order: same decisions.
  std::vector<RequestView> shuffled = {reqs[0], reqs[1], reqs[4], reqs[2], reqs[3]};
  const ScheduleOutput c = schedule(sched(8, 512), {shuffled}, cache);
  for (const ScheduleOutput* o : {&b, &c}) {
    ASSERT_EQ(o->scheduled.size(), a.scheduled.size());
    for (size_t i = 0; i < a.scheduled.size(); ++i) {
      EXPECT_EQ(o->scheduled[i].id, a.scheduled[i].id);
      EXPECT_EQ(o->scheduled[i].num_new_tokens, a.scheduled[i].num_new_tokens);
      EXPECT_EQ(o->scheduled[i].is_prefill_chunk, a.scheduled[i].is_prefill_chunk);
      EXPECT_EQ(o->scheduled[i].samples_token, a.scheduled[i].samples_token);
    }
    EXPECT_EQ(o->preempted, a.preempted);
    EXPECT_EQ(o->total_num_scheduled_tokens, a.total_num_scheduled_tokens);
  }
  // 4 (900 tokens) does not fit after 3; 5 (priority 1) is behind it.
  EXPECT_EQ(scheduled_ids(a), (std::vector<SeqId>{1, 2, 3}));
  EXPECT_EQ(a.total_num_scheduled_tokens, 92);
  // Nothing was mutated.
  EXPECT_EQ(cache.used_pages(), used);
  EXPECT_EQ(cache.num_tokens(1), 200);
  EXPECT_FALSE(cache.contains(3));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].num_computed_tokens, copy[i].num_computed_tokens);
    EXPECT_EQ(reqs[i].status, copy[i].status);
  }
}

TEST(Scheduler, ManyRequestsUnderMemoryPressureAllFinish) {
  // 40 requests, memory for about 5 at full length, small token budget: exercises admission,
  // chunking, preemption and resumption together; the limits are checked every step.
  SimEngine e(micro(), pages(5 * pages_for(400)), sched(16, 96));
  for (int i = 0; i < 40; ++i)
    e.add(50 + (i * 53) % 250, 20 + (i * 31) % 120, static_cast<int32_t>(i % 3));
  run_to_completion(e);
  EXPECT_EQ(e.finished().size(), 40u);
  EXPECT_FALSE(e.preemptions().empty());
  for (const auto& [id, r] : e.finished())
    EXPECT_EQ(r.num_tokens - r.num_prompt_tokens, r.max_tokens) << id;
}

TEST(SchedulerConfig, Validation) {
  EXPECT_NO_THROW(validate_scheduler_config(sched(1, 1)));
  EXPECT_THROW(validate_scheduler_config(sched(0, 1)), Error);
  EXPECT_THROW(validate_scheduler_config(sched(1, 0)), Error);
}

}  // namespace
}  // namespace di
