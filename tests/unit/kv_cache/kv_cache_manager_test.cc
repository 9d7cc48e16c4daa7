#include "kv_cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "common/error.h"
#include "kv_cache/kv_cache_planner.h"
#include "kv_cache/page_pool.h"
#include "unit/kv_cache/test_states.h"

namespace di {
namespace {

using testing_states::state_of;

constexpr int64_t kPage = 64 * 1024;

KvCacheConfig budget_pages(int64_t pages, int64_t page_bytes = kPage) {
  return {static_cast<uint64_t>(pages * page_bytes), page_bytes};
}

// Every page id held by every sequence, checking that no id is held twice.
std::set<int32_t> all_pages(const KvCacheManager& m, const std::vector<SeqId>& seqs) {
  std::set<int32_t> ids;
  size_t count = 0;
  for (SeqId s : seqs) {
    for (const StateTable& t : m.layout().tables()) {
      for (int32_t p : m.pages(s, t.kind, t.owner)) {
        ids.insert(p);
        ++count;
      }
    }
  }
  EXPECT_EQ(ids.size(), count) << "a page id is held twice";
  return ids;
}

class ConfigTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ConfigTest, ExactBytesEqualStateBytesAtEveryLength) {
  const StateBytes st = state_of(GetParam());
  KvCacheManager m(st, budget_pages(0));
  for (int64_t n = 0; n <= 5000; ++n)
    ASSERT_EQ(m.layout().exact_bytes(n), st.sequence_bytes(n)) << n;
  for (int64_t n : {65535LL, 65536LL, 65537LL, 1048575LL, 1048576LL})
    ASSERT_EQ(m.layout().exact_bytes(n), st.sequence_bytes(n)) << n;
}

TEST_P(ConfigTest, GrowingSequenceAccountsExactly) {
  const StateBytes st = state_of(GetParam());
  KvCacheManager probe(st, budget_pages(0));
  KvCacheManager m(st, budget_pages(probe.pages_for_tokens(70000) + 8));
  const int64_t tables = static_cast<int64_t>(m.layout().tables().size());
  int64_t n = 0;
  m.allocate(1, 0);
  while (n <= 70000) {
    ASSERT_EQ(m.num_tokens(1), n);
    ASSERT_EQ(m.exact_bytes(1), st.sequence_bytes(n)) << n;
    ASSERT_EQ(m.total_exact_bytes(), st.sequence_bytes(n));
    ASSERT_GE(m.allocated_bytes(1), m.exact_bytes(1));
    // Each table wastes less than one page.
    ASSERT_LT(m.allocated_bytes(1) - m.exact_bytes(1), static_cast<uint64_t>(tables * kPage));
    ASSERT_EQ(m.pages_held(1), m.pages_for_tokens(n));
    ASSERT_EQ(m.used_pages(), m.pages_held(1));
    ASSERT_EQ(m.total_allocated_bytes(), m.allocated_bytes(1));
    for (const StateTable& t : m.layout().tables())
      ASSERT_EQ(static_cast<int64_t>(m.pages(1, t.kind, t.owner).size()), t.pages(n));
    const int64_t step = n < 3000 ? 1 : 997;
    const int64_t need = m.pages_needed(1, n + step);
    const int64_t before = m.used_pages();
    m.allocate(1, n + step);
    ASSERT_EQ(m.used_pages() - before, need);
    n += step;
  }
}

TEST_P(ConfigTest, FreshSequencesAtManyLengths) {
  const StateBytes st = state_of(GetParam());
  KvCacheManager probe(st, budget_pages(0));
  const std::vector<int64_t> lengths = {0, 1, 2, 3, 7, 127, 128, 129, 1000, 4095, 4096, 12345};
  int64_t total = 0;
  for (int64_t n : lengths)
    total += probe.pages_for_tokens(n);
  KvCacheManager m(st, budget_pages(total));
  uint64_t exact = 0;
  std::vector<SeqId> ids;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const auto id = static_cast<SeqId>(100 + i);
    ASSERT_TRUE(m.can_fit(id, lengths[i]));
    m.allocate(id, lengths[i]);
    ids.push_back(id);
    exact += st.sequence_bytes(lengths[i]);
    ASSERT_EQ(m.exact_bytes(id), st.sequence_bytes(lengths[i]));
  }
  EXPECT_EQ(m.total_exact_bytes(), exact);
  EXPECT_EQ(m.free_pages(), 0);
  EXPECT_DOUBLE_EQ(m.usage(), 1.0);
  EXPECT_EQ(all_pages(m, ids).size(), static_cast<size_t>(total));
  for (SeqId id : ids)
    m.free(id);
  EXPECT_EQ(m.used_pages(), 0);
  EXPECT_EQ(m.total_exact_bytes(), 0u);
  EXPECT_EQ(m.usage(), 0.0);
  EXPECT_EQ(m.num_sequences(), 0u);
}

INSTANTIATE_TEST_SUITE_P(V41, ConfigTest,
                         ::testing::Values("configs/v41-flash.json", "configs/v41-tiny.json",
                                           "tests/data/v41-micro.json"));

TEST(KvCacheLayout, FlashTables) {
  const StateBytes st = state_of("configs/v41-flash.json");
  const StateLayout layout(st, kPage);
  // 43 SWA rings (40 layers + 3 DSpark stages) x 128 x 528 B in one table of 124-entry pages.
  const StateTable& swa = layout.tables()[layout.table_index(StateKind::kSwaRing, 0)];
  EXPECT_EQ(swa.fixed_entries, 43 * 128);
  EXPECT_EQ(swa.entry_bytes, 528);
  EXPECT_EQ(swa.entries_per_page, 124);
  EXPECT_EQ(layout.num_owners(), 4);
  const StateTable& kv0 = layout.tables()[layout.table_index(StateKind::kCompressedKv, 0)];
  EXPECT_EQ(kv0.block, 2);
  EXPECT_EQ(kv0.ratio, 2);
  EXPECT_EQ(kv0.entry_bytes, 288);
  const StateTable& idx3 = layout.tables()[layout.table_index(StateKind::kIndexKeys, 3)];
  EXPECT_EQ(idx3.block, 20);
  EXPECT_EQ(idx3.ratio, 1);
  EXPECT_EQ(idx3.entry_bytes, 68);
  EXPECT_EQ(idx3.entries_per_page, kPage / 68);
  EXPECT_THROW((void)layout.table_index(StateKind::kCompressedKv, 4), Error);
  EXPECT_THROW((void)layout.table_index(StateKind::kSwaRing, 1), Error);
}

TEST(KvCacheLayout, PageSmallerThanAnEntryIsRejected) {
  const StateBytes st = state_of("configs/v41-flash.json");
  EXPECT_THROW(KvCacheManager(st, {1u << 30, 512}), Error);
  EXPECT_NO_THROW(KvCacheManager(st, {1u << 30, 528}));
}

TEST(KvCacheManager, PagesAreRecycled) {
  const StateBytes st = state_of("tests/data/v41-micro.json");
  KvCacheManager probe(st, budget_pages(0, 4096));
  const int64_t per_seq = probe.pages_for_tokens(500);
  KvCacheManager m(st, budget_pages(2 * per_seq, 4096));
  m.allocate(1, 500);
  m.allocate(2, 500);
  EXPECT_EQ(m.free_pages(), 0);
  EXPECT_FALSE(m.can_fit(3, 0));
  const std::set<int32_t> a = all_pages(m, {1});
  m.free(1);
  EXPECT_FALSE(m.contains(1));
  EXPECT_EQ(m.used_pages(), per_seq);
  m.allocate(3, 500);  // reuses exactly the pages of sequence 1
  EXPECT_EQ(all_pages(m, {3}), a);
  EXPECT_EQ(all_pages(m, {2, 3}).size(), static_cast<size_t>(2 * per_seq));
  m.free(2);
  m.free(3);
  m.free(3);  // unknown ids are ignored
  EXPECT_EQ(m.used_pages(), 0);
  EXPECT_EQ(m.free_pages(), m.total_pages());
  EXPECT_EQ(m.total_exact_bytes(), 0u);
}

TEST(KvCacheManager, ManyCyclesReturnToZero) {
  const StateBytes st = state_of("configs/v41-tiny.json");
  KvCacheManager m(st, budget_pages(4000, 4096));
  std::vector<SeqId> live;
  SeqId next = 0;
  uint64_t lcg = 12345;
  for (int it = 0; it < 2000; ++it) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t r = static_cast<int64_t>(lcg >> 33);
    if (!live.empty() && r % 3 == 0) {
      const size_t k = static_cast<size_t>(r) % live.size();
      m.free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (!live.empty() && r % 3 == 1) {
      const SeqId s = live[static_cast<size_t>(r) % live.size()];
      const int64_t to = m.num_tokens(s) + r % 300;
      if (m.can_fit(s, to)) m.allocate(s, to);
    } else if (m.can_fit(next, r % 2000)) {
      m.allocate(next, r % 2000);
      live.push_back(next++);
    }
    uint64_t exact = 0;
    int64_t held = 0;
    for (SeqId s : live) {
      exact += m.exact_bytes(s);
      held += m.pages_held(s);
    }
    ASSERT_EQ(m.total_exact_bytes(), exact);
    ASSERT_EQ(m.used_pages(), held);
  }
  (void)all_pages(m, live);
  for (SeqId s : live)
    m.free(s);
  EXPECT_EQ(m.used_pages(), 0);
  EXPECT_EQ(m.usage(), 0.0);
  EXPECT_EQ(m.total_exact_bytes(), 0u);
}

TEST(KvCacheManager, CanFitBoundaries) {
  const StateBytes st = state_of("tests/data/v41-micro.json");
  KvCacheManager probe(st, budget_pages(0, 4096));
  const int64_t n = 3000;
  KvCacheManager m(st, budget_pages(probe.pages_for_tokens(n), 4096));
  // The longest length with the same page count as n fits; the first one needing a page more
  // does not.
  int64_t last = n;
  while (m.pages_for_tokens(last + 1) == m.pages_for_tokens(n))
    ++last;
  EXPECT_TRUE(m.can_fit(7, last));
  EXPECT_FALSE(m.can_fit(7, last + 1));
  EXPECT_EQ(m.pages_needed(7, last + 1), m.total_pages() + 1);
  EXPECT_EQ(m.max_tokens_that_fit_alone(), last);
  EXPECT_THROW(m.allocate(7, last + 1), Error);
  EXPECT_FALSE(m.contains(7));
  EXPECT_EQ(m.used_pages(), 0);
  m.allocate(7, 100);
  EXPECT_TRUE(m.can_fit(7, last));
  EXPECT_FALSE(m.can_fit(7, last + 1));
  EXPECT_EQ(m.pages_needed(7, 50), 0);     // below the held length
  EXPECT_THROW(m.allocate(7, 50), Error);  // no shrinking
  EXPECT_EQ(m.num_tokens(7), 100);
  m.allocate(7, last);
  EXPECT_EQ(m.free_pages(), 0);
  EXPECT_THROW(m.allocate(7, last + 1), Error);
  EXPECT_EQ(m.num_tokens(7), last);
  EXPECT_THROW(m.allocate(8, 0), Error);  // fixed state of a second sequence
}

TEST(KvCacheManager, MaxTokensThatFitAlone) {
  const StateBytes st = state_of("configs/v41-flash.json");
  KvCacheManager probe(st, budget_pages(0));
  const int64_t fixed = probe.pages_for_tokens(0);
  EXPECT_EQ(KvCacheManager(st, budget_pages(fixed - 1)).max_tokens_that_fit_alone(), -1);
  KvCacheManager m(st, {8ull << 30, kPage});
  const int64_t t = m.max_tokens_that_fit_alone();
  EXPECT_LE(m.pages_for_tokens(t), m.total_pages());
  EXPECT_GT(m.pages_for_tokens(t + 1), m.total_pages());
  // ~890 B/token after ~2.9 MB of fixed state: 8 GiB holds about 9.6M tokens.
  EXPECT_GT(t, 9'000'000);
  EXPECT_LT(t, 10'000'000);
}

TEST(KvCacheManager, DeterministicPageAssignment) {
  const StateBytes st = state_of("configs/v41-tiny.json");
  auto run = [&] {
    KvCacheManager m(st, budget_pages(3000, 4096));
    m.allocate(5, 300);
    m.allocate(9, 1000);
    m.free(5);
    m.allocate(2, 77);
    m.allocate(9, 1500);
    m.allocate(4, 4000);
    std::vector<int32_t> ids;
    for (SeqId s : {9, 2, 4}) {
      for (const StateTable& t : m.layout().tables()) {
        const auto p = m.pages(s, t.kind, t.owner);
        ids.insert(ids.end(), p.begin(), p.end());
      }
    }
    return ids;
  };
  const std::vector<int32_t> a = run();
  EXPECT_EQ(a, run());
  EXPECT_FALSE(a.empty());
}

TEST(KvCacheManager, UnknownSequenceQueries) {
  const StateBytes st = state_of("tests/data/v41-micro.json");
  KvCacheManager m(st, budget_pages(100, 4096));
  EXPECT_EQ(m.num_tokens(42), 0);
  EXPECT_EQ(m.pages_held(42), 0);
  EXPECT_EQ(m.pages_needed(42, 10), m.pages_for_tokens(10));
  EXPECT_THROW((void)m.pages(42, StateKind::kSwaRing), Error);
  EXPECT_THROW((void)m.exact_bytes(42), Error);
}

TEST(KvCachePlanner, PlanThenCommitNeverThrows) {
  const StateBytes st = state_of("tests/data/v41-micro.json");
  KvCacheManager probe(st, budget_pages(0, 4096));
  KvCacheManager m(st, budget_pages(probe.pages_for_tokens(2000) * 2 + 1, 4096));
  m.allocate(1, 1000);
  m.allocate(2, 1000);
  KvCachePlanner plan(m);
  EXPECT_EQ(plan.free_pages(), m.free_pages());
  EXPECT_TRUE(plan.try_reserve(1, 2000));
  EXPECT_FALSE(plan.try_reserve(3, 2000));  // no room for a third sequence
  const int64_t before = plan.free_pages();
  plan.release(2);
  EXPECT_EQ(plan.free_pages(), before + m.pages_held(2));
  EXPECT_TRUE(plan.try_reserve(3, 2000));
  plan.release(1);                   // gives back its held pages and its reservation
  EXPECT_EQ(m.num_tokens(1), 1000);  // the manager is untouched
  // Commit the surviving decisions: free 2 and 1, allocate 3.
  m.free(2);
  m.free(1);
  EXPECT_NO_THROW(m.allocate(3, 2000));
  EXPECT_EQ(m.free_pages(), plan.free_pages());
}

TEST(PagePool, TakesFreshIdsInOrderAndReusesLastFreed) {
  PagePool pool(4);
  EXPECT_EQ(pool.take(), 0);
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 2);
  pool.release(1);
  pool.release(0);
  EXPECT_EQ(pool.take(), 0);
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 3);
  EXPECT_THROW(pool.take(), Error);
  pool.release(3);
  EXPECT_THROW(pool.release(3), Error);  // double free
  EXPECT_THROW(pool.release(7), Error);
  EXPECT_EQ(pool.used(), 3);
}

}  // namespace
}  // namespace di
