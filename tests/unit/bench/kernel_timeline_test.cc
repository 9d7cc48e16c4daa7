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

KernelRecord rec(uint64_t start, uint64_t end, const std::string& name, uint32_t stream = 0,
                 int32_t grid = 0, int32_t block = 0) {
  KernelRecord r;
  r.start_ns = start;
  r.end_ns = end;
  r.name = name;
  r.stream = stream;
  r.grid = grid;
  r.block = block;
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
  write_kernel_csv({rec(3000, 4500, "b", 7, 132, 256), rec(1000, 2000, "a")}, path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "start_us,end_us,stream,grid,block,kernel\n"
            "0.000,1.000,0,0,0,a\n"
            "2.000,3.500,7,132,256,b\n");
  EXPECT_THROW(write_kernel_csv({}, (dir / "absent" / "x.csv").string()), std::exception);
}

// read_kernel_csv gives back what write_kernel_csv wrote (times from the first start, ns);
// a name may hold commas (it is the rest of the line); bad files name the path and the line.
TEST(KernelTimeline, CsvReadsBackAndRejectsBadLines) {
  testing::TempDir dir;
  const std::string path = (dir / "trace.csv").string();
  write_kernel_csv({rec(3000, 4500, "b, with a comma", 7, 132, 256), rec(1000, 2000, "a")}, path);
  const std::vector<KernelRecord> back = read_kernel_csv(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].name, "a");
  EXPECT_EQ(back[0].start_ns, 0u);
  EXPECT_EQ(back[0].end_ns, 1000u);
  EXPECT_EQ(back[1].name, "b, with a comma");
  EXPECT_EQ(back[1].start_ns, 2000u);
  EXPECT_EQ(back[1].end_ns, 3500u);
  EXPECT_EQ(back[1].stream, 7u);
  EXPECT_EQ(back[1].grid, 132);
  EXPECT_EQ(back[1].block, 256);

  const auto expect_error = [&](const std::string& text, const std::string& what) {
    const std::string bad = (dir / "bad.csv").string();
    std::ofstream(bad) << text;
    try {
      read_kernel_csv(bad);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.csv"), std::string::npos) << e.what();
    }
  };
  expect_error("start,end\n", "line 1");
  expect_error("start_us,end_us,stream,grid,block,kernel\n0.000,1.000,0,0,0,a\n1,x,0,0,0,b\n",
               "line 3");
  expect_error("start_us,end_us,stream,grid,block,kernel\n2.000,1.000,0,0,0,a\n", "line 2");
  expect_error("start_us,end_us,stream,grid,block,kernel\n0.000,1.000,0,0,0,\n", "line 2");
  EXPECT_THROW(read_kernel_csv((dir / "absent.csv").string()), std::exception);
}

// The deltas cover every name of both sides, largest |B - A| first, and add up to the spans'
// difference.
TEST(KernelTimeline, DiffOrdersByTheChangeAndAddsUpToTheSpans) {
  const KernelSummary a =
      summarize_kernels({rec(0, 10, "attn"), rec(10, 30, "gemm"), rec(30, 35, "norm")});
  const KernelSummary b =
      summarize_kernels({rec(0, 18, "attn"), rec(18, 38, "gemm"), rec(38, 40, "fused")});
  const std::vector<KernelDelta> d = diff_kernels(a, b);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].name, "attn");  // +8
  EXPECT_DOUBLE_EQ(d[0].from_prev_a_ns, 10);
  EXPECT_DOUBLE_EQ(d[0].from_prev_b_ns, 18);
  EXPECT_EQ(d[1].name, "norm");  // -5, absent from B
  EXPECT_EQ(d[1].launches_a, 1);
  EXPECT_EQ(d[1].launches_b, 0);
  EXPECT_EQ(d[2].name, "fused");  // +2, absent from A
  EXPECT_EQ(d[2].launches_a, 0);
  EXPECT_EQ(d[3].name, "gemm");  // 0
  double sum = 0;
  for (const KernelDelta& x : d)
    sum += x.from_prev_b_ns - x.from_prev_a_ns;
  EXPECT_DOUBLE_EQ(sum, b.span_ns - a.span_ns);
}

}  // namespace
}  // namespace di::bench
