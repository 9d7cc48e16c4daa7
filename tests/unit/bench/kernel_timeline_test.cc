// The kernel timeline's arithmetic (bench/kernel_timeline.h): the span, the idle gaps, the time
// from the previous kernel's end (which adds up to the span, PDL overlap included) and the
// aggregation per kernel name; the CSV in start order.
#include "kernel_timeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests_support/temp_dir.h"

namespace di::bench {
namespace {

KernelRecord rec(uint64_t start, uint64_t end, const std::string& name) {
  KernelRecord r;
  r.start_ns = start;
  r.end_ns = end;
  r.name = name;
  return r;
}

const KernelRow& row(const KernelSummary& s, const std::string& name) {
  for (const KernelRow& r : s.rows)
    if (r.name == name) return r;
  ADD_FAILURE() << "no row " << name;
  return s.rows.front();
}

// One after the other with a 2 ns launch gap: the gap is idle and charged to the kernel after it.
TEST(KernelTimeline, SerialKernelsChargeTheGapToTheNextOne) {
  const KernelSummary s =
      summarize_kernels({rec(100, 110, "a"), rec(112, 120, "b"), rec(120, 130, "c")});
  EXPECT_DOUBLE_EQ(s.span_ns, 30);
  EXPECT_DOUBLE_EQ(s.idle_ns, 2);
  EXPECT_DOUBLE_EQ(s.resident_ns, 28);
  EXPECT_DOUBLE_EQ(row(s, "a").from_prev_ns, 10);
  EXPECT_DOUBLE_EQ(row(s, "b").from_prev_ns, 10);
  EXPECT_DOUBLE_EQ(row(s, "c").from_prev_ns, 10);
}

// Launched early (PDL) and resident while the predecessor runs: resident time exceeds the span,
// the from-prev times still add up to it, in end order; nothing is idle. Records in any order.
TEST(KernelTimeline, OverlappingKernelsAddUpToTheSpan) {
  const KernelSummary s =
      summarize_kernels({rec(6, 25, "c"), rec(0, 10, "a"), rec(5, 18, "b"), rec(7, 9, "side")});
  EXPECT_DOUBLE_EQ(s.span_ns, 25);
  EXPECT_DOUBLE_EQ(s.idle_ns, 0);
  EXPECT_DOUBLE_EQ(s.resident_ns, 10 + 13 + 19 + 2);
  // End order: side (9), a (10), b (18), c (25).
  EXPECT_DOUBLE_EQ(row(s, "side").from_prev_ns, 9);
  EXPECT_DOUBLE_EQ(row(s, "a").from_prev_ns, 1);
  EXPECT_DOUBLE_EQ(row(s, "b").from_prev_ns, 8);
  EXPECT_DOUBLE_EQ(row(s, "c").from_prev_ns, 7);
  double sum = 0;
  for (const KernelRow& r : s.rows)
    sum += r.from_prev_ns;
  EXPECT_DOUBLE_EQ(sum, s.span_ns);
  EXPECT_EQ(s.rows.front().name, "side");  // largest from-prev first
}

// Launches of one name add up into one row; an empty trace is an empty summary.
TEST(KernelTimeline, RowsAggregatePerName) {
  const KernelSummary s =
      summarize_kernels({rec(0, 4, "gemm"), rec(10, 16, "norm"), rec(20, 30, "gemm")});
  ASSERT_EQ(s.rows.size(), 2u);
  EXPECT_EQ(row(s, "gemm").launches, 2);
  EXPECT_DOUBLE_EQ(row(s, "gemm").resident_ns, 14);
  EXPECT_DOUBLE_EQ(row(s, "gemm").from_prev_ns, 4 + 14);
  EXPECT_DOUBLE_EQ(s.idle_ns, 6 + 4);
  const KernelSummary none = summarize_kernels({});
  EXPECT_TRUE(none.rows.empty());
  EXPECT_DOUBLE_EQ(none.span_ns, 0);
}

TEST(KernelTimeline, CsvIsInStartOrderFromTheFirstStart) {
  testing::TempDir dir;
  const std::string path = (dir / "trace.csv").string();
  KernelRecord late = rec(3000, 4500, "b");
  late.stream = 7;
  late.grid = 132;
  late.block = 256;
  write_kernel_csv({late, rec(1000, 2000, "a")}, path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "start_us,end_us,stream,grid,block,kernel\n"
            "0.000,1.000,0,0,0,a\n"
            "2.000,3.500,7,132,256,b\n");
  EXPECT_THROW(write_kernel_csv({}, (dir / "absent" / "x.csv").string()), std::exception);
}

}  // namespace
}  // namespace di::bench
